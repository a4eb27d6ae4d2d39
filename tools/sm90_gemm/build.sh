#!/usr/bin/env bash
# The Hopper GEMM engine as .sm90dev/libgeglu_gemm_sm90.so (the C ABI of
# geglu_gemm_sm90.h) for check_and_bench.py, ncu_probe.py and check_linear.py, built by
# build_lib.sh (CUTLASS headers and nvcc flags there; report in ptxas_libgeglu_gemm_sm90.log).
# Default: the tuning build, tools/sm90_gemm/geglu_gemm_sm90_tuning.cu (the product's
# variants + the tuning ones). LEAN=1: the product source alone,
# geglu_kernels/cuda/geglu_gemm_sm90.cu. Extra arguments go to nvcc.
set -euo pipefail
src=tools/sm90_gemm/geglu_gemm_sm90_tuning.cu
[ "${LEAN:-0}" = 1 ] && src=geglu_kernels/cuda/geglu_gemm_sm90.cu
exec "$(dirname "$0")/build_lib.sh" "$src" libgeglu_gemm_sm90 "$@"
