#!/usr/bin/env bash
# Builds the Hopper GEMM engine into .sm90dev/libgeglu_gemm_sm90.so (a standalone
# shared library with the C ABI of geglu_gemm_sm90.h; cudart linked statically, no
# torch). Needs nvcc >= 12.3 and CUTLASS 4.2 headers: CUTLASS_INCLUDE=/path/to/cutlass/include,
# else those of the nvidia-cutlass wheel installed in .venv (requirements.txt), else the
# wheel unpacked to /tmp/cutlass.
# Default: the tuning build, tools/sm90_gemm/geglu_gemm_sm90_tuning.cu (the product's 3
# variants + 8 tuning ones, 0-10). LEAN=1: the product source alone,
# geglu_kernels/cuda/geglu_gemm_sm90.cu (variants 0-2). Extra nvcc flags can be passed
# as arguments.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
inc="${CUTLASS_INCLUDE:-}"
if [ -z "$inc" ] && [ -x "$root/.venv/bin/python" ]; then
  inc="$("$root/.venv/bin/python" -c 'import cutlass_library, os; print(os.path.join(os.path.dirname(cutlass_library.__file__), "source", "include"))' 2>/dev/null || true)"
fi
[ -d "$inc/cute" ] || inc=/tmp/cutlass/cutlass_library/source/include
if [ ! -d "$inc/cute" ]; then
  whl="${CUTLASS_WHEEL:-/tmp/cutlass_whl/nvidia_cutlass-4.2.0.0-py3-none-any.whl}"
  mkdir -p /tmp/cutlass && (cd /tmp/cutlass && unzip -q -o "$whl")
  inc=/tmp/cutlass/cutlass_library/source/include
fi
src="$root/tools/sm90_gemm/geglu_gemm_sm90_tuning.cu"
[ "${LEAN:-0}" = 1 ] && src="$root/geglu_kernels/cuda/geglu_gemm_sm90.cu"
out="$root/.sm90dev"
mkdir -p "$out"
start=$(date +%s)
nvcc -gencode=arch=compute_90a,code=sm_90a -std=c++17 --expt-relaxed-constexpr -O3 -DNDEBUG \
  -Xptxas -v -shared -Xcompiler -fPIC -cudart static \
  -I"$inc" -I"$root/geglu_kernels/cuda" "$@" \
  -o "$out/libgeglu_gemm_sm90.so" "$src" \
  2> >(tee "$out/ptxas.log" >&2)
echo "built $out/libgeglu_gemm_sm90.so in $(( $(date +%s) - start )) s"
grep -E "registers|spill|stack" "$out/ptxas.log" | grep -v "^ptxas info    : Compiling" || true
