// Fused GeGLU GEMM for Hopper (sm_90a) on CUTLASS 3.x / CuTe: the C launcher of the
// product's kernel variants. See geglu_gemm_sm90.cuh for the design, the variants and
// the shape pick, and geglu_gemm_sm90.h for the ABI.
//
// Build: nvcc -gencode=arch=compute_90a,code=sm_90a -std=c++17 --expt-relaxed-constexpr
//        -O3 -DNDEBUG -I<cutlass>/include (tools/build.py). The tuner's library with more
//        variants: tools/sm90_gemm/build.sh (geglu_gemm_sm90_tuning.cu there).

#include "geglu_gemm_sm90.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "cutlass/cutlass.h"
#include "cutlass/kernel_hardware_info.h"
#include "cutlass/gemm/gemm.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"

#include "geglu_gemm_sm90.cuh"
#include "sm90_launcher.cuh"

namespace geglu_sm90 {

struct LaunchArgs {  // the params-cache key: zeroed, padding included, before it is filled
  const void* x;
  int64_t M, K, ldx;
  const void* wg;
  const void* wu;
  int64_t ldw;
  const void* bg;
  const void* bu;
  void* out;
  int64_t H, ldo;
  int approximate;
  int swizzle;  // tile scheduler max_swizzle_size (1, 2, 4, 8)
  int raster;   // 0 heuristic, 1 along M, 2 along N
};

template <class Gemm>
int run(LaunchArgs const& a, int device, int sm_count, cudaStream_t stream) {
  using Kernel = typename Gemm::Kernel;
  using Element = typename Gemm::Epilogue::Element;
  auto make_arguments = [device, sm_count](LaunchArgs const& a) {
    typename Kernel::Arguments args{};
    args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
    args.problem_shape = make_shape(int(a.M), int(2 * a.H), int(a.K), 1);
    auto& ml = args.mainloop;
    ml.ptr_A = static_cast<Element const*>(a.x);
    ml.dA = make_stride(a.ldx, Int<1>{}, a.M * a.ldx);
    ml.ptr_Bg = static_cast<Element const*>(a.wg);
    ml.ptr_Bu = static_cast<Element const*>(a.wu);
    ml.dB = make_stride(a.ldw, Int<1>{}, a.H * a.ldw);
    auto& ep = args.epilogue;
    ep.ptr_out = static_cast<Element*>(a.out);
    ep.ldo = a.ldo;
    ep.bias_g = static_cast<Element const*>(a.bg);
    ep.bias_u = static_cast<Element const*>(a.bu);
    ep.approximate = a.approximate;
    args.hw_info.device_id = device;
    args.hw_info.sm_count = sm_count;
    args.scheduler.max_swizzle_size = a.swizzle;
    using Raster = cutlass::gemm::kernel::detail::RasterOrderOptions;
    args.scheduler.raster_order = a.raster == 1 ? Raster::AlongM : a.raster == 2 ? Raster::AlongN : Raster::Heuristic;
    return args;
  };
  constexpr int cm = size<0>(typename Gemm::ClusterShape{});
  constexpr int cn = size<1>(typename Gemm::ClusterShape{});
  return sm90_launcher::status_of(
      sm90_launcher::Runner<Kernel, cm, cn, LaunchArgs>::run(a, device, stream, make_arguments));
}

template <class Element>
int dispatch(int variant, LaunchArgs const& a, int device, int sm_count, cudaStream_t stream) {
  switch (variant) {
#define GEGLU_SM90_CASE(id, name, bm, bn, sched, ...) \
  case id:                                            \
    return run<GegluGemm<Element, bm, bn, sched, __VA_ARGS__>>(a, device, sm_count, stream);
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
  if (dtype != GEGLU_SM90_BF16 && dtype != GEGLU_SM90_FP16) return GEGLU_SM90_ERR_DTYPE;
  constexpr int64_t kMax = (int64_t(1) << 31) - 1;
  // 2H is the problem N (int32) and M*ldx, H*ldw index the batch stride.
  if (M < 0 || K < 1 || H < 1 || M > kMax || K > kMax || 2 * H > kMax) return GEGLU_SM90_ERR_SHAPE;
  if (ldx < K || ldw < K || ldo < H) return GEGLU_SM90_ERR_SHAPE;
  if (M == 0) return GEGLU_SM90_OK;
  const int64_t elem = 2;
  if ((K * elem) % 16 || (ldx * elem) % 16 || (ldw * elem) % 16 || (ldo * elem) % 16) {
    return GEGLU_SM90_ERR_STRIDE;
  }
  auto misaligned = [](const void* p) { return p == nullptr || (reinterpret_cast<uintptr_t>(p) & 15u) != 0; };
  if (misaligned(x) || misaligned(w_gate) || misaligned(w_up) || misaligned(out)) return GEGLU_SM90_ERR_ALIGN;
  if ((reinterpret_cast<uintptr_t>(b_gate) & 3u) || (reinterpret_cast<uintptr_t>(b_up) & 3u)) {
    return GEGLU_SM90_ERR_ALIGN;
  }
  const geglu_sm90::VariantPick pick = geglu_sm90::pick_variant(M, K, H);

  int device = 0;
  sm90_launcher::DeviceInfo const* info = sm90_launcher::current_sm90_device(&device);
  if (info == nullptr) return GEGLU_SM90_ERR_DEVICE;

  geglu_sm90::LaunchArgs a;
  std::memset(&a, 0, sizeof a);
  a.x = x;
  a.M = M;
  a.K = K;
  a.ldx = ldx;
  a.wg = w_gate;
  a.wu = w_up;
  a.ldw = ldw;
  a.bg = b_gate;
  a.bu = b_up;
  a.out = out;
  a.H = H;
  a.ldo = ldo;
  a.approximate = approximate ? 1 : 0;
  a.swizzle = pick.swizzle;
  a.raster = pick.raster;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (dtype == GEGLU_SM90_BF16) {
    return geglu_sm90::dispatch<cutlass::bfloat16_t>(pick.variant, a, device, info->sm_count, s);
  }
  return geglu_sm90::dispatch<cutlass::half_t>(pick.variant, a, device, info->sm_count, s);
}

}  // extern "C"
