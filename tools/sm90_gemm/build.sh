#!/usr/bin/env bash
# The tuner's build of the Hopper GEMM engine, .sm90dev/libgeglu_gemm_sm90.so: the
# product's four kernel variants and eight more behind the tuning C ABI
# (tools/sm90_gemm/geglu_gemm_sm90_tuning.cu) for check_and_bench.py, ncu_probe.py and
# check_swap.py, built by build_lib.sh (CUTLASS headers and nvcc flags there; report in
# ptxas_libgeglu_gemm_sm90.log). Extra arguments go to nvcc.
set -euo pipefail
exec "$(dirname "$0")/build_lib.sh" tools/sm90_gemm/geglu_gemm_sm90_tuning.cu libgeglu_gemm_sm90 "$@"
