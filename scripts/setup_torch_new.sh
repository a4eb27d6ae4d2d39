#!/usr/bin/env bash
# A second environment with the newest torch on PyPI (2.15.0; its default wheel is CUDA
# 13.2, which imports and runs CPU tensors on a machine without a GPU) and kernels, for
# tests/integration/test_stable_abi.py: the stable-ABI CPU variant built with the
# pinned torch (2.13, .venv) must load and compute under it too. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${GEGLU_NEW_TORCH_VENV:-.venv-torch-new}
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import torch, kernels; assert torch.__version__.startswith('2.15.')" 2>/dev/null; then
  # PIP_CONFIG_FILE=/dev/null: PyPI itself (a machine's pip.conf may pin other indexes).
  # --no-cache-dir: the CUDA wheels are ~3.5 GB, and a cached copy of them is what ran
  # CI's disk full.
  PIP_CONFIG_FILE=/dev/null "$VENV/bin/python" -m pip install -q --no-cache-dir --disable-pip-version-check \
    torch==2.15.0 kernels==0.17.2 numpy
fi
"$VENV/bin/python" -c "import torch, kernels; print(f'setup (new torch): torch {torch.__version__}, kernels {kernels.__version__}')"
