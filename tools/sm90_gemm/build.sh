#!/usr/bin/env bash
# Builds geglu_kernels/cuda/geglu_gemm_sm90.cu into .sm90dev/libgeglu_gemm_sm90.so
# (a standalone shared library with the C ABI of geglu_gemm_sm90.h; cudart linked
# statically, no torch). Needs nvcc >= 12.3 and CUTLASS 4.2 headers:
#   CUTLASS_INCLUDE=/path/to/cutlass/include (default: unpacked from the nvidia-cutlass wheel).
# All kernel variants are built (-DGEGLU_SM90_ALL_CONFIGS, for tuning); LEAN=1 builds only
# the ones the shape pick uses, as an integration build would. Extra nvcc flags can be
# passed as arguments.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
inc="${CUTLASS_INCLUDE:-/tmp/cutlass/cutlass_library/source/include}"
if [ ! -d "$inc/cute" ]; then
  whl="${CUTLASS_WHEEL:-/tmp/cutlass_whl/nvidia_cutlass-4.2.0.0-py3-none-any.whl}"
  mkdir -p /tmp/cutlass && (cd /tmp/cutlass && unzip -q -o "$whl")
  inc=/tmp/cutlass/cutlass_library/source/include
fi
out="$root/.sm90dev"
mkdir -p "$out"
start=$(date +%s)
nvcc -gencode=arch=compute_90a,code=sm_90a -std=c++17 --expt-relaxed-constexpr -O3 -DNDEBUG \
  -Xptxas -v -shared -Xcompiler -fPIC -cudart static \
  -I"$inc" -I"$root/geglu_kernels/cuda" $([ "${LEAN:-0}" = 1 ] || echo -DGEGLU_SM90_ALL_CONFIGS) "$@" \
  -o "$out/libgeglu_gemm_sm90.so" "$root/geglu_kernels/cuda/geglu_gemm_sm90.cu" \
  2> >(tee "$out/ptxas.log" >&2)
echo "built $out/libgeglu_gemm_sm90.so in $(( $(date +%s) - start )) s"
grep -E "registers|spill|stack" "$out/ptxas.log" | grep -v "^ptxas info    : Compiling" || true
