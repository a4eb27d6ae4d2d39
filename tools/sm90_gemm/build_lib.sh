#!/usr/bin/env bash
# Builds one CUDA source into .sm90dev/<lib>.so (C ABI, cudart static, no torch) for the
# ctypes check/bench scripts here; ptxas's register/spill report goes to
# .sm90dev/ptxas_<lib>.log and its summary to the terminal:
#   tools/sm90_gemm/build_lib.sh geglu_kernels/cuda/sm90/bf16/linear_gelu_sm90.cu liblinear_gelu_sm90 # check_linear_gelu.py
#   tools/sm90_gemm/build.sh                                                                 # the GeGLU engine
# Extra arguments go to nvcc. Needs nvcc >= 12.3 and CUTLASS 4.2 headers:
# CUTLASS_INCLUDE=/path/to/cutlass/include, else those of the nvidia-cutlass wheel in
# .venv (requirements.txt), else the wheel unpacked to /tmp/cutlass (CUTLASS_WHEEL).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
src="$1"
lib="$2"
shift 2
inc="${CUTLASS_INCLUDE:-}"
if [ -z "$inc" ] && [ -x "$root/.venv/bin/python" ]; then
  inc="$("$root/.venv/bin/python" -c 'import cutlass_library, os; print(os.path.join(os.path.dirname(cutlass_library.__file__), "source", "include"))' 2>/dev/null || true)"
fi
[ -d "$inc/cute" ] || inc=/tmp/cutlass/cutlass_library/source/include
if [ ! -d "$inc/cute" ]; then
  whl="${CUTLASS_WHEEL:-/tmp/cutlass_whl/nvidia_cutlass-4.2.0.0-py3-none-any.whl}"
  mkdir -p /tmp/cutlass && (cd /tmp/cutlass && unzip -q -o "$whl")
fi
out="$root/.sm90dev"
mkdir -p "$out"
start=$(date +%s)
nvcc -gencode=arch=compute_90a,code=sm_90a -std=c++17 --expt-relaxed-constexpr -O3 -DNDEBUG \
  -Xptxas -v -shared -Xcompiler -fPIC -cudart static \
  -I"$inc" -I"$root/geglu_kernels/cuda" "$@" \
  -o "$out/$lib.so" "$root/$src" \
  2> >(tee "$out/ptxas_$lib.log" >&2)
echo "built $out/$lib.so in $(( $(date +%s) - start )) s"
grep -E "registers|spill|stack" "$out/ptxas_$lib.log" | grep -v "^ptxas info    : Compiling" || true
