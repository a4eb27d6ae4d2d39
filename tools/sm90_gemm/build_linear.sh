#!/usr/bin/env bash
# Builds the small-M Hopper linear experiment (tools/sm90_gemm/linear_sm90.cu) into
# .sm90dev/liblinear_sm90.so: C ABI of linear_sm90.h, cudart static, no torch; for
# tools/sm90_gemm/check_linear.py. CUTLASS headers as in build.sh.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
inc="${CUTLASS_INCLUDE:-$("$root/.venv/bin/python" -c 'import cutlass_library, os; print(os.path.join(os.path.dirname(cutlass_library.__file__), "source", "include"))')}"
out="$root/.sm90dev"
mkdir -p "$out"
start=$(date +%s)
nvcc -gencode=arch=compute_90a,code=sm_90a -std=c++17 --expt-relaxed-constexpr -O3 -DNDEBUG \
  -Xptxas -v -shared -Xcompiler -fPIC -cudart static \
  -I"$inc" "$@" \
  -o "$out/liblinear_sm90.so" "$root/tools/sm90_gemm/linear_sm90.cu" \
  2> >(tee "$out/ptxas_linear.log" >&2)
echo "built $out/liblinear_sm90.so in $(( $(date +%s) - start )) s"
grep -E "registers|spill" "$out/ptxas_linear.log" | grep -v "^ptxas info    : Compiling" || true
