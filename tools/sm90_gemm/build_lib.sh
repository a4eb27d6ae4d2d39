#!/usr/bin/env bash
# Builds one CUDA source into .sm90dev/<lib>.so (C ABI, cudart static, no torch) for the
# ctypes check/bench scripts here:
#   tools/sm90_gemm/build_lib.sh tools/sm90_gemm/linear_sm90.cu liblinear_sm90             # check_linear.py
#   tools/sm90_gemm/build_lib.sh geglu_kernels/cuda/linear_gelu_sm90.cu liblinear_gelu_sm90 \
#       -DLINEAR_GELU_SM90_BF16_ONLY                                                         # check_linear_gelu.py
# Extra arguments go to nvcc. CUTLASS headers as in build.sh.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
src="$1"
lib="$2"
shift 2
inc="${CUTLASS_INCLUDE:-$("$root/.venv/bin/python" -c 'import cutlass_library, os; print(os.path.join(os.path.dirname(cutlass_library.__file__), "source", "include"))')}"
out="$root/.sm90dev"
mkdir -p "$out"
start=$(date +%s)
nvcc -gencode=arch=compute_90a,code=sm_90a -std=c++17 --expt-relaxed-constexpr -O3 -DNDEBUG \
  -Xptxas -v -shared -Xcompiler -fPIC -cudart static \
  -I"$inc" -I"$root/geglu_kernels/cuda" "$@" \
  -o "$out/$lib.so" "$root/$src" \
  2> >(tee "$out/ptxas_$lib.log" >&2)
echo "built $out/$lib.so in $(( $(date +%s) - start )) s"
grep -E "registers|spill" "$out/ptxas_$lib.log" | grep -v "^ptxas info    : Compiling" || true
