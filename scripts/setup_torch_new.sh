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
  # From PyPI, one requirement per pip call (install_stepwise.py says why).
  "$VENV/bin/python" scripts/install_stepwise.py torch==2.15.0 kernels==0.17.2 numpy
fi
"$VENV/bin/python" -c "import torch, kernels; print(f'setup (new torch): torch {torch.__version__}, kernels {kernels.__version__}')"
