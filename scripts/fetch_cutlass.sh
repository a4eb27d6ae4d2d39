#!/usr/bin/env bash
# The CUTLASS headers the release builds take (build.toml's cutlass_4_4: kernel-builder's
# CUTLASS 4.4.2), into DEST (default .cache/cutlass-v4.4.2): a shallow, include/-only
# checkout of NVIDIA/cutlass v4.4.2 (~20 MB). Prints DEST; fails if GitHub does not answer.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:-.cache/cutlass-v4.4.2}
if [ ! -f "$dest/include/cutlass/version.h" ]; then
  rm -rf "$dest"
  mkdir -p "$(dirname "$dest")"
  timeout 300 git clone -q --depth 1 --filter=blob:none --sparse -b v4.4.2 https://github.com/NVIDIA/cutlass "$dest"
  git -C "$dest" sparse-checkout set include
fi
grep -q "define CUTLASS_MINOR 4" "$dest/include/cutlass/version.h"
echo "$dest"
