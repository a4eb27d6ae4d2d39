#!/usr/bin/env bash
# Build (not run) the CUDA variant on a machine without a GPU: a second virtual
# environment with PyPI's CUDA 13.0 build of torch 2.13.0 (about 4.3 GB with its NVIDIA
# libraries), then tools/build.py compiles, ABI-checks (torch stable ABI included) and
# assembles torch-stable-abi210-cu130-x86_64-linux, and its copy under the version-tied
# name torch213-cxx11-cu130-x86_64-linux, into build-cu130/. Importing the variant
# needs a GPU, so the load check is skipped; the digest and kernel-abi-check still run.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# cpp_extension derives CUDA_HOME from the first nvcc on PATH; on these machines that is
# /usr/local/bin/nvcc, whose prefix has no CUDA headers.
if [ -z "${CUDA_HOME:-}" ] && [ -x /usr/local/cuda/bin/nvcc ]; then
  export CUDA_HOME=/usr/local/cuda
fi
VENV=.venv-cu130
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
# One requirement per pip call, from PyPI (install_stepwise.py says why); without triton,
# which this build never imports (~0.9 GB less).
"$VENV/bin/python" scripts/install_stepwise.py --skip triton torch==2.13.0 \
  ninja==1.13.0 numpy kernels==0.17.2 kernels-data==0.16.2 kernel-abi-check==0.14.1 nvidia-cutlass==4.2.0.0 \
  || { echo "build_cuda_variant: could not install torch 2.13.0 (CUDA) from PyPI" >&2; exit 1; }
"$VENV/bin/python" -c "import torch; assert torch.version.cuda, torch.__version__; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
# The CUTLASS headers of the release builds (build.toml's cutlass_4_4: kernel-builder's
# 4.4.2), not the nvidia-cutlass wheel's 4.2 (docs/BUILDING.md#cutlass): CUTLASS_PATH, or
# fetched by scripts/fetch_cutlass.sh. GEGLU_CUTLASS_WHEEL=1 compiles against the wheel's
# headers instead (CI's compile check where GitHub is out of reach).
if [ "${GEGLU_CUTLASS_WHEEL:-0}" = 1 ]; then
  unset CUTLASS_PATH
  echo "build_cuda_variant: GEGLU_CUTLASS_WHEEL=1: the nvidia-cutlass wheel's headers, not the release's CUTLASS" >&2
else
  CUTLASS_PATH=${CUTLASS_PATH:-$(bash scripts/fetch_cutlass.sh)} \
    || { echo "build_cuda_variant: no CUTLASS 4.4.2: set CUTLASS_PATH to a checkout of v4.4.2" \
           "(or GEGLU_CUTLASS_WHEEL=1 for the nvidia-cutlass wheel's headers)" >&2; exit 1; }
  export CUTLASS_PATH
fi
"$VENV/bin/python" -m tools.build --backend cuda --no-noarch --skip-load-check --out build-cu130 --work .cache/build-cu130
test -f build-cu130/torch-stable-abi210-cu130-x86_64-linux/metadata.json
test -f build-cu130/torch213-cxx11-cu130-x86_64-linux/metadata.json
