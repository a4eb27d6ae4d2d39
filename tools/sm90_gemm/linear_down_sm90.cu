// Experiment (issue 11: "the down projection with bias and/or residual wherever it beats
// cuBLAS"): the MLP's down projection at prefill sizes on CUTLASS 3.x for Hopper,
//
//   out[m, n] = sum_k x[m, k] W[n, k] + bias[n] + residual[m, n]
//
// the engine's bias + GELU GEMM (geglu_kernels/cuda/sm90/bf16/linear_gelu_sm90.cu) without the
// activation and with the residual as the epilogue's C source (beta = 1; without one,
// beta = 0 and the epilogue loads no source). Built alone by build_lib.sh into
// .sm90dev/liblinear_down_sm90.so and timed against cuBLAS by check_linear_down.py.
// Several tile configurations; the C ABI takes the variant index.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "cutlass/cutlass.h"
#include "cutlass/kernel_hardware_info.h"
#include "cutlass/gemm/gemm.h"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"

#include "sm90/common/sm90_launcher.cuh"

namespace down_gemm {

using namespace cute;

template <class Element, int BM, int BN, class Schedule, int ClusterM, int ClusterN>
struct LinearDown {
  using TileShape = Shape<Int<BM>, Int<BN>, _64>;
  using ClusterShape = Shape<Int<ClusterM>, Int<ClusterN>, _1>;
  static constexpr bool kCooperative = std::is_same_v<Schedule, cutlass::gemm::KernelTmaWarpSpecializedCooperative>;
  using EpilogueSchedule = std::conditional_t<kCooperative, cutlass::epilogue::TmaWarpSpecializedCooperative,
                                              cutlass::epilogue::TmaWarpSpecialized>;
  using Fusion = cutlass::epilogue::fusion::LinCombPerColBias<Element, float, Element, Element, float>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float,
      Element, cutlass::layout::RowMajor, 8,  // C = residual [M, N]
      Element, cutlass::layout::RowMajor, 8,  // D = out [M, N]
      EpilogueSchedule, Fusion>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
      Element, cutlass::layout::RowMajor, 8,     // A = x [M, K]
      Element, cutlass::layout::ColumnMajor, 8,  // B = W [N, K]
      float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<
          static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      Schedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue,
                                                      cutlass::gemm::PersistentScheduler>;
};

struct LaunchArgs {  // the params-cache key: zeroed, padding included, before it is filled
  const void* x;
  const void* w;
  const void* bias;
  const void* residual;
  void* out;
  int64_t M, K, N, ldx, ldw, ldr, ldo;
};

template <class Gemm>
int run(LaunchArgs const& a, int device, int sm_count, cudaStream_t stream) {
  using Kernel = typename Gemm::Kernel;
  using Element = typename Kernel::ElementA;
  auto make_arguments = [device, sm_count](LaunchArgs const& a) {
    typename Kernel::Arguments args{};
    args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
    args.problem_shape = make_shape(int(a.M), int(a.N), int(a.K), 1);
    args.mainloop.ptr_A = static_cast<Element const*>(a.x);
    args.mainloop.dA = make_stride(a.ldx, Int<1>{}, a.M * a.ldx);
    args.mainloop.ptr_B = static_cast<Element const*>(a.w);
    args.mainloop.dB = make_stride(a.ldw, Int<1>{}, a.N * a.ldw);
    // Without a residual, C aliases D with beta = 0: the epilogue then loads no source.
    const int64_t ldc = a.residual ? a.ldr : a.ldo;
    args.epilogue.ptr_C = static_cast<Element const*>(a.residual ? a.residual : a.out);
    args.epilogue.dC = make_stride(ldc, Int<1>{}, a.M * ldc);
    args.epilogue.ptr_D = static_cast<Element*>(a.out);
    args.epilogue.dD = make_stride(a.ldo, Int<1>{}, a.M * a.ldo);
    args.epilogue.thread.alpha = 1.0f;
    args.epilogue.thread.beta = a.residual ? 1.0f : 0.0f;
    args.epilogue.thread.bias_ptr = static_cast<Element const*>(a.bias);
    args.hw_info.device_id = device;
    args.hw_info.sm_count = sm_count;
    return args;
  };
  constexpr int cm = size<0>(typename Gemm::ClusterShape{});
  constexpr int cn = size<1>(typename Gemm::ClusterShape{});
  return sm90_launcher::status_of(
      sm90_launcher::Runner<Kernel, cm, cn, LaunchArgs>::run(a, device, stream, make_arguments));
}

using cutlass::gemm::KernelTmaWarpSpecializedCooperative;
using cutlass::gemm::KernelTmaWarpSpecializedPingpong;

// X(id, name, BM, BN, schedule, cluster M, cluster N)
#define LINEAR_DOWN_SM90_VARIANTS(X)                                          \
  X(0, "pingpong_128x128x64_c2", 128, 128, KernelTmaWarpSpecializedPingpong, 2, 1)   \
  X(1, "pingpong_128x128x64_c1", 128, 128, KernelTmaWarpSpecializedPingpong, 1, 1)   \
  X(2, "coop_256x128x64_c2", 256, 128, KernelTmaWarpSpecializedCooperative, 2, 1)    \
  X(3, "coop_128x256x64_c2", 128, 256, KernelTmaWarpSpecializedCooperative, 2, 1)    \
  X(4, "pingpong_64x256x64_c2", 64, 256, KernelTmaWarpSpecializedPingpong, 2, 1)

#define LINEAR_DOWN_SM90_COUNT(id, ...) +1
constexpr int kNumConfigs = 0 LINEAR_DOWN_SM90_VARIANTS(LINEAR_DOWN_SM90_COUNT);
#define LINEAR_DOWN_SM90_NAME(id, name, ...) name,
const char* const kConfigNames[] = {LINEAR_DOWN_SM90_VARIANTS(LINEAR_DOWN_SM90_NAME)};

template <class Element>
int dispatch(int config, LaunchArgs const& a, int device, int sm_count, cudaStream_t stream) {
  switch (config) {
#define LINEAR_DOWN_SM90_CASE(id, name, bm, bn, sched, cm, cn) \
  case id:                                                     \
    return run<LinearDown<Element, bm, bn, sched, cm, cn>>(a, device, sm_count, stream);
    LINEAR_DOWN_SM90_VARIANTS(LINEAR_DOWN_SM90_CASE)
#undef LINEAR_DOWN_SM90_CASE
    default:
      return GEGLU_SM90_ERR_CONFIG;
  }
}

}  // namespace down_gemm

extern "C" {

int linear_down_sm90_num_configs(void) { return down_gemm::kNumConfigs; }

const char* linear_down_sm90_config_name(int config) {
  if (config < 0 || config >= down_gemm::kNumConfigs) return "";
  return down_gemm::kConfigNames[config];
}

// bf16 only (the experiment); strides in elements; returns a GEGLU_SM90_* status.
int linear_down_sm90(const void* x, int64_t M, int64_t K, int64_t ldx, const void* w, int64_t N, int64_t ldw,
                     const void* bias, const void* residual, int64_t ldr, void* out, int64_t ldo, int config,
                     void* stream) {
  constexpr int64_t kMax = (int64_t(1) << 31) - 1;
  if (M < 0 || K < 1 || N < 1 || M > kMax || K > kMax || N > kMax) return GEGLU_SM90_ERR_SHAPE;
  if (ldx < K || ldw < K || ldo < N || (residual && ldr < N)) return GEGLU_SM90_ERR_SHAPE;
  if (M == 0) return GEGLU_SM90_OK;
  if ((K * 2) % 16 || (N * 2) % 16 || (ldx * 2) % 16 || (ldw * 2) % 16 || (ldo * 2) % 16 ||
      (residual && (ldr * 2) % 16)) {
    return GEGLU_SM90_ERR_STRIDE;
  }
  auto misaligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) != 0; };
  if (x == nullptr || w == nullptr || out == nullptr || misaligned(x) || misaligned(w) || misaligned(out) ||
      misaligned(residual) || (reinterpret_cast<uintptr_t>(bias) & 3u)) {
    return GEGLU_SM90_ERR_ALIGN;
  }
  if (config < 0 || config >= down_gemm::kNumConfigs) return GEGLU_SM90_ERR_CONFIG;
  int device = 0;
  sm90_launcher::DeviceInfo const* info = sm90_launcher::current_sm90_device(&device);
  if (info == nullptr) return GEGLU_SM90_ERR_DEVICE;
  down_gemm::LaunchArgs a;
  std::memset(&a, 0, sizeof a);
  a.x = x;
  a.w = w;
  a.bias = bias;
  a.residual = residual;
  a.out = out;
  a.M = M;
  a.K = K;
  a.N = N;
  a.ldx = ldx;
  a.ldw = ldw;
  a.ldr = residual ? ldr : 0;
  a.ldo = ldo;
  return down_gemm::dispatch<cutlass::bfloat16_t>(config, a, device, info->sm_count,
                                                  static_cast<cudaStream_t>(stream));
}

}  // extern "C"
