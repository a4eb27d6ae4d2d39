// Fused GeGLU GEMM for Hopper (sm_90a) on CUTLASS 3.x / CuTe: kernels and the C launcher.
// See geglu_gemm_sm90.cuh for the design and geglu_gemm_sm90.h for the ABI.
//
// Build: nvcc -gencode=arch=compute_90a,code=sm_90a -std=c++17 --expt-relaxed-constexpr
//        -O3 -DNDEBUG -I<cutlass>/include (tools/build.py; standalone: LEAN=1
//        tools/sm90_gemm/build.sh). The tuning build, tools/sm90_gemm/build.sh, compiles
//        tools/sm90_gemm/geglu_gemm_sm90_tuning.cu, which adds variants and includes this file.

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

template <class Element, int BM, int BN, class Schedule, int ClusterM, int ClusterN = 1>
struct GegluGemm {
  static constexpr int kBN = BN;
  using TileShape = Shape<Int<BM>, Int<2 * BN>, Int<64>>;
  using ClusterShape = Shape<Int<ClusterM>, Int<ClusterN>, _1>;
  using Epilogue = GegluEpilogue<Element, BN>;
  using CollectiveEpilogue = cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<Epilogue>;
  using MainloopBase = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
      Element, cutlass::layout::RowMajor, 8,     // A = x [M, K], K contiguous
      Element, cutlass::layout::ColumnMajor, 8,  // B = W [N, K], K contiguous
      float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<
          static_cast<int>(sizeof(typename CollectiveEpilogue::TensorStorage))>,
      Schedule>::CollectiveOp;
  using Mainloop = GegluMainloopSm90<MainloopBase, BN>;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop,
                                                      CollectiveEpilogue,
                                                      cutlass::gemm::PersistentScheduler>;
  using Params = typename Kernel::Params;
};

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
#ifdef GEGLU_SM90_TUNING_VARIANTS
  int nostore;  // tuning build only: skip the output stores (times the rest)
#endif
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
#ifdef GEGLU_SM90_TUNING_VARIANTS
    ep.debug_nostore = a.nostore;
#endif
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

using cutlass::gemm::KernelTmaWarpSpecializedCooperative;
using cutlass::gemm::KernelTmaWarpSpecializedPingpong;

// The variants: X(id, name, BM, BN, schedule, cluster M[, cluster N]). BN = output
// columns per tile; the wgmma N is 2*BN. These four are the ones pick_config uses;
// the tuning build (tools/sm90_gemm/geglu_gemm_sm90_tuning.cu) defines
// GEGLU_SM90_TUNING_VARIANTS with more, numbered from 4, and includes this file.
#define GEGLU_SM90_PRODUCT_VARIANTS(X)                                                         \
  X(0, "pingpong_64x(2x128)x64_c1", 64, 128, KernelTmaWarpSpecializedPingpong, 1)              \
  X(1, "coop_128x(2x128)x64_c2", 128, 128, KernelTmaWarpSpecializedCooperative, 2)             \
  X(2, "pingpong_128x(2x64)x64_c2", 128, 64, KernelTmaWarpSpecializedPingpong, 2)              \
  X(3, "pingpong_64x(2x64)x64_c1", 64, 64, KernelTmaWarpSpecializedPingpong, 1)

#ifdef GEGLU_SM90_TUNING_VARIANTS
#define GEGLU_SM90_VARIANTS(X) GEGLU_SM90_PRODUCT_VARIANTS(X) GEGLU_SM90_TUNING_VARIANTS(X)
#else
#define GEGLU_SM90_VARIANTS(X) GEGLU_SM90_PRODUCT_VARIANTS(X)
#endif

#define GEGLU_SM90_COUNT(id, name, bm, bn, sched, ...) +1
constexpr int kNumConfigs = 0 GEGLU_SM90_VARIANTS(GEGLU_SM90_COUNT);

#define GEGLU_SM90_NAME(id, name, bm, bn, sched, ...) name,
const char* const kConfigNames[] = {GEGLU_SM90_VARIANTS(GEGLU_SM90_NAME)};

template <class Element>
int dispatch(int config, LaunchArgs const& a, int device, int sm_count, cudaStream_t stream) {
  switch (config) {
#define GEGLU_SM90_CASE(id, name, bm, bn, sched, ...) \
  case id:                                            \
    return run<GegluGemm<Element, bm, bn, sched, __VA_ARGS__>>(a, device, sm_count, stream);
    GEGLU_SM90_VARIANTS(GEGLU_SM90_CASE)
#undef GEGLU_SM90_CASE
    default:
      return GEGLU_SM90_ERR_CONFIG;
  }
}

// Returns an encoded config (variant | swizzle/raster bits, as in the ABI).
// Measured on H100 SXM (benchmarks/results/gemm_sm90_h100.log, linear_sm90_h100.log):
// - M <= 64 (decode): 3, pingpong 64x(2x64): twice the tiles of 0, so the weight
//   stream spreads over ~3 waves instead of ~1.5 (Gemma-7B, 16 tokens: 108.5 vs
//   111.0 us, 90% of the read bandwidth; cuBLAS's merged GEMM 109.6);
// - M <= 128: 0, pingpong 64x(2x128) (fewest wasted rows, most CTAs along N);
// - x larger than ~20 MB (gemma7b prefill, 4096 x 3072): 1, cooperative 128x(2x128),
//   cluster 2 (B multicast), raster along N with swizzle 4 (0x2301; a tie with the
//   heuristic raster over three interleaved runs), where pingpong 128x(2x64) lost
//   15% (L2-bandwidth bound: see tools/sm90_gemm/README.md);
// - otherwise 2, pingpong 128x(2x64), cluster 2 (epilogue hidden behind the other
//   warpgroup's MMA): blog 8192x768->3072, gemma2b 4096x2048->16384, M 256..2048.
int pick_config(int64_t M, int64_t K, int64_t H) {
  (void)H;
  if (M <= 64) return 3;
  if (M <= 128) return 0;
  if (double(M) * double(K) * 2.0 > 20e6) return 1 | (3 << 8) | (2 << 12);
  return 2;
}

}  // namespace geglu_sm90

extern "C" {

const char* geglu_gemm_sm90_status_string(int status) {
  switch (status) {
    case GEGLU_SM90_OK: return "ok";
    case GEGLU_SM90_ERR_DTYPE: return "unsupported dtype (bf16 and fp16 only)";
    case GEGLU_SM90_ERR_SHAPE: return "unsupported shape (need K >= 1, H >= 1, sizes < 2^31, ldx >= K, ldw >= K, ldo >= H)";
    case GEGLU_SM90_ERR_STRIDE: return "unsupported strides (K, ldx, ldw, ldo times element size must be multiples of 16 bytes)";
    case GEGLU_SM90_ERR_ALIGN: return "unsupported pointer alignment (x, w_gate, w_up, out must be 16-byte aligned and non-null; biases 4-byte aligned)";
    case GEGLU_SM90_ERR_DEVICE: return "current device is not sm_90 (Hopper)";
    case GEGLU_SM90_ERR_CONFIG: return "config index out of range";
    case GEGLU_SM90_ERR_CUTLASS: return "CUTLASS rejected the problem";
    case GEGLU_SM90_ERR_CUDA: return "CUDA error at launch (geglu_gemm_sm90_last_cuda_error() has the code)";
    default: return "unknown status";
  }
}

int geglu_gemm_sm90_last_cuda_error(void) { return sm90_launcher::last_cuda_error(); }

int geglu_gemm_sm90_num_configs(void) { return geglu_sm90::kNumConfigs; }

const char* geglu_gemm_sm90_config_name(int config) {
  if (config < 0 || config >= geglu_sm90::kNumConfigs) return "";
  return geglu_sm90::kConfigNames[config];
}

int geglu_gemm_sm90_pick_config(int64_t M, int64_t K, int64_t H, int dtype) {
  (void)dtype;
  return geglu_sm90::pick_config(M, K, H);
}

int geglu_gemm_sm90(const void* x, int64_t M, int64_t K, int64_t ldx,
                    const void* w_gate, const void* w_up, int64_t ldw,
                    const void* b_gate, const void* b_up,
                    void* out, int64_t H, int64_t ldo,
                    int dtype, int approximate, int config, void* stream) {
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
  if (config < 0) config = geglu_sm90::pick_config(M, K, H);
  const int variant = config & 0xff;
  const int swz_code = (config >> 8) & 0xf;   // 0: 1, else 2^(code-1)
  const int raster = (config >> 12) & 0xf;
#ifdef GEGLU_SM90_TUNING_VARIANTS
  const int nostore = (config >> 16) & 1;  // tuning build only: store nothing
  config &= ~(1 << 16);
#endif
  if (variant >= geglu_sm90::kNumConfigs || swz_code > 4 || raster > 2 || (config >> 16) != 0) {
    return GEGLU_SM90_ERR_CONFIG;
  }
  const int swizzle = swz_code == 0 ? 1 : 1 << (swz_code - 1);

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
  a.swizzle = swizzle;
  a.raster = raster;
#ifdef GEGLU_SM90_TUNING_VARIANTS
  a.nostore = nostore;
#endif
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (dtype == GEGLU_SM90_BF16) {
    return geglu_sm90::dispatch<cutlass::bfloat16_t>(variant, a, device, info->sm_count, s);
  }
  return geglu_sm90::dispatch<cutlass::half_t>(variant, a, device, info->sm_count, s);
}

}  // extern "C"
