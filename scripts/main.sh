#!/usr/bin/env bash
# The main job: set up, build build/<variant>/ for this environment (compile, ABI
# check, digest), then load it through `kernels` and print what was loaded.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python -m tools.build "$@"
.venv/bin/python -m tools.load_check
