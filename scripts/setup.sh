#!/usr/bin/env bash
# Create .venv with the pinned toolchain (torch 2.13.0, kernels 0.17.x, kernels-data,
# kernel-abi-check, triton, transformers, pytest). Idempotent: a second run is quick.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
if ! .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt; then
  echo "setup: pip install -r requirements.txt failed" >&2
  exit 1
fi
.venv/bin/python -c "import torch, kernels, kernels_data, kernel_abi_check, triton, transformers; \
print(f'setup: torch {torch.__version__}, kernels {kernels.__version__}, triton {triton.__version__}, transformers {transformers.__version__}')"
