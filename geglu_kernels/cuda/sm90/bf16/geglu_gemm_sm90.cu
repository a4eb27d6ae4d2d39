// Fused GeGLU GEMM for Hopper (sm_90a) on CUTLASS 3.x / CuTe: the C launcher of the
// product's kernel variants. See geglu_gemm_sm90.cuh for the design, the variants and
// the shape pick, and geglu_gemm_sm90.h for the ABI.
//
// Build: nvcc -gencode=arch=compute_90a,code=sm_90a -std=c++17 --expt-relaxed-constexpr
//        -O3 -DNDEBUG -I<cutlass>/include (tools/build.py). The tuner's library with more
//        variants: tools/sm90_gemm/build.sh (geglu_gemm_sm90_tuning.cu there).

#include "sm90/bf16/geglu_gemm_sm90.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "cutlass/cutlass.h"
#include "cutlass/kernel_hardware_info.h"
#include "cutlass/gemm/gemm.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"

#include "sm90/common/gate_up_launch.cuh"
#include "sm90/bf16/geglu_gemm_sm90.cuh"
#include "sm90/common/sm90_launcher.cuh"

namespace geglu_sm90 {

using gate_up_launch::LaunchArgs;

template <class Element>
int dispatch(int variant, LaunchArgs const& a, cudaStream_t stream) {
  switch (variant) {
#define GEGLU_SM90_CASE(id, name, bm, bn, sched, ...) \
  case id:                                            \
    return gate_up_launch::launch_engine<GegluGemm<Element, bm, bn, sched, __VA_ARGS__>>(a, stream);
    GEGLU_SM90_PRODUCT_VARIANTS(GEGLU_SM90_CASE)
#undef GEGLU_SM90_CASE
    default:
      return GEGLU_SM90_ERR_CONFIG;
  }
}

}  // namespace geglu_sm90

extern "C" {

const char* geglu_gemm_sm90_status_string(int status) { return sm90_launcher::status_string(status); }

int geglu_gemm_sm90_last_cuda_error(void) { return sm90_launcher::last_cuda_error(); }

int geglu_gemm_sm90(const void* x, int64_t M, int64_t K, int64_t ldx,
                    const void* w_gate, const void* w_up, int64_t ldw,
                    const void* b_gate, const void* b_up,
                    void* out, int64_t H, int64_t ldo,
                    int dtype, int approximate, void* stream) {
  // 2H is the problem N (int32) and M*ldx, H*ldw index the batch stride.
  if (int status = gate_up_launch::check_shapes(dtype, M, K, H, ldx, ldw, ldo)) return status;
  if (M == 0) return GEGLU_SM90_OK;
  if (int status = gate_up_launch::check_engine_operands(K, ldx, ldw, ldo, x, w_gate, w_up, out, b_gate, b_up)) {
    return status;
  }
  const geglu_sm90::VariantPick pick = geglu_sm90::pick_variant(M, K, H);
  geglu_sm90::LaunchArgs a;
  gate_up_launch::make_key(&a, x, M, K, ldx, w_gate, w_up, ldw, b_gate, b_up, out, H, ldo, approximate);
  a.swizzle = pick.swizzle;
  a.raster = pick.raster;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (dtype == GEGLU_SM90_BF16) return geglu_sm90::dispatch<cutlass::bfloat16_t>(pick.variant, a, s);
  return geglu_sm90::dispatch<cutlass::half_t>(pick.variant, a, s);
}

}  // extern "C"
