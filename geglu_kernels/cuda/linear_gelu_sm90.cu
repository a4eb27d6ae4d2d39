// Bias + GELU linear for Hopper (sm_90a) on CUTLASS 3.x: kernels and the C launcher
// (ABI: linear_gelu_sm90.h).
//
// A stock warp-specialized TMA GEMM (CollectiveBuilder mainloop) whose epilogue is the
// fusion gelu(acc + bias[n]) (LinCombPerColBiasEltAct: a row broadcast of the bias, then
// the activation, in float32, before the one store). The GELU is gelu_math.cuh's, the
// one the package's elementwise kernels use, so every route rounds the same function.
// No C operand (ElementC = void): nothing but x and W is read.
//
// Build: part of the geglu_gemm_sm90 kernel of build.toml (sm_90a only).

#include "linear_gelu_sm90.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "cutlass/cutlass.h"
#include "cutlass/array.h"
#include "cutlass/kernel_hardware_info.h"
#include "cutlass/gemm/gemm.h"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"

#include "gelu_math.cuh"
#include "sm90_launcher.cuh"

namespace bias_gelu_gemm {

using namespace cute;

// The epilogue's activation: CUTLASS applies it to float32 fragments (Array<float, N>)
// and instantiates it with the scalar type for its (empty) arguments.
template <bool kTanh, class T>
struct Gelu {
  CUTLASS_DEVICE T operator()(T const& v) const { return geglu_cuda::gelu<kTanh>(v); }
};
template <bool kTanh, int N>
struct Gelu<kTanh, cutlass::Array<float, N>> {
  CUTLASS_DEVICE cutlass::Array<float, N> operator()(cutlass::Array<float, N> const& v) const {
    cutlass::Array<float, N> y;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) y[i] = geglu_cuda::gelu<kTanh>(v[i]);
    return y;
  }
};
template <class T>
using GeluTanh = Gelu<true, T>;
template <class T>
using GeluExact = Gelu<false, T>;

template <class Element, bool kTanh, int BM, int BN, class Schedule, int ClusterM, int ClusterN>
struct LinearGelu {
  using TileShape = Shape<Int<BM>, Int<BN>, _64>;
  using ClusterShape = Shape<Int<ClusterM>, Int<ClusterN>, _1>;
  static constexpr bool kCooperative = std::is_same_v<Schedule, cutlass::gemm::KernelTmaWarpSpecializedCooperative>;
  using EpilogueSchedule = std::conditional_t<kCooperative, cutlass::epilogue::TmaWarpSpecializedCooperative,
                                              cutlass::epilogue::TmaWarpSpecialized>;
  template <class T>
  using Act = std::conditional_t<kTanh, GeluTanh<T>, GeluExact<T>>;
  using Fusion = cutlass::epilogue::fusion::LinCombPerColBiasEltAct<Act, Element, float, Element, Element, float>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float,
      void, cutlass::layout::RowMajor, 8,     // no C
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
  void* out;
  int64_t M, K, N, ldx, ldw, ldo;
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
    args.epilogue.ptr_C = nullptr;
    args.epilogue.ptr_D = static_cast<Element*>(a.out);
    args.epilogue.dD = make_stride(a.ldo, Int<1>{}, a.M * a.ldo);
    args.epilogue.thread.alpha = 1.0f;
    args.epilogue.thread.beta = 0.0f;
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

using cutlass::gemm::KernelTmaWarpSpecializedPingpong;

// X(id, name, BM, BN, schedule, cluster M, cluster N). One variant: in the H100 sweep
// (tools/sm90_gemm/check_linear_gelu.py, benchmarks/results/linear_gelu_sm90_h100.log)
// it beat cooperative 128x256 and 256x128 (cluster 2x1), cooperative 128x128 (1x2) and
// pingpong 64x128 by 4-20% at BERT-large and GPT-2-XL sizes and tied the best of them at
// 4096x2048->5120; at 64 tokens all of them lost to cuBLAS (the op then keeps cuBLAS:
// mlp_kernels.cpp).
#define LINEAR_GELU_SM90_VARIANTS(X) \
  X(0, "pingpong_128x128x64_c2", 128, 128, KernelTmaWarpSpecializedPingpong, 2, 1)

#define LINEAR_GELU_SM90_COUNT(id, ...) +1
constexpr int kNumConfigs = 0 LINEAR_GELU_SM90_VARIANTS(LINEAR_GELU_SM90_COUNT);
#define LINEAR_GELU_SM90_NAME(id, name, ...) name,
const char* const kConfigNames[] = {LINEAR_GELU_SM90_VARIANTS(LINEAR_GELU_SM90_NAME)};

template <class Element, bool kTanh>
int dispatch(int config, LaunchArgs const& a, int device, int sm_count, cudaStream_t stream) {
  switch (config) {
#define LINEAR_GELU_SM90_CASE(id, name, bm, bn, sched, cm, cn) \
  case id:                                                     \
    return run<LinearGelu<Element, kTanh, bm, bn, sched, cm, cn>>(a, device, sm_count, stream);
    LINEAR_GELU_SM90_VARIANTS(LINEAR_GELU_SM90_CASE)
#undef LINEAR_GELU_SM90_CASE
    default:
      return GEGLU_SM90_ERR_CONFIG;
  }
}

int pick_config(int64_t, int64_t, int64_t) { return 0; }

}  // namespace bias_gelu_gemm

extern "C" {

int linear_gelu_sm90_num_configs(void) { return bias_gelu_gemm::kNumConfigs; }

const char* linear_gelu_sm90_config_name(int config) {
  if (config < 0 || config >= bias_gelu_gemm::kNumConfigs) return "";
  return bias_gelu_gemm::kConfigNames[config];
}

int linear_gelu_sm90(const void* x, int64_t M, int64_t K, int64_t ldx,
                     const void* w, int64_t N, int64_t ldw, const void* bias,
                     void* out, int64_t ldo, int dtype, int approximate, int config, void* stream) {
  if (dtype != GEGLU_SM90_BF16 && dtype != GEGLU_SM90_FP16) return GEGLU_SM90_ERR_DTYPE;
  constexpr int64_t kMax = (int64_t(1) << 31) - 1;
  if (M < 0 || K < 1 || N < 1 || M > kMax || K > kMax || N > kMax) return GEGLU_SM90_ERR_SHAPE;
  if (ldx < K || ldw < K || ldo < N) return GEGLU_SM90_ERR_SHAPE;
  if (M == 0) return GEGLU_SM90_OK;
  const int64_t elem = 2;
  if ((K * elem) % 16 || (N * elem) % 16 || (ldx * elem) % 16 || (ldw * elem) % 16 || (ldo * elem) % 16) {
    return GEGLU_SM90_ERR_STRIDE;
  }
  auto misaligned = [](const void* p) { return p == nullptr || (reinterpret_cast<uintptr_t>(p) & 15u) != 0; };
  if (misaligned(x) || misaligned(w) || misaligned(out) || (reinterpret_cast<uintptr_t>(bias) & 3u)) {
    return GEGLU_SM90_ERR_ALIGN;
  }
  if (config < 0) config = bias_gelu_gemm::pick_config(M, N, K);
  if (config >= bias_gelu_gemm::kNumConfigs) return GEGLU_SM90_ERR_CONFIG;

  int device = 0;
  sm90_launcher::DeviceInfo const* info = sm90_launcher::current_sm90_device(&device);
  if (info == nullptr) return GEGLU_SM90_ERR_DEVICE;

  bias_gelu_gemm::LaunchArgs a;
  std::memset(&a, 0, sizeof a);
  a.x = x;
  a.w = w;
  a.bias = bias;
  a.out = out;
  a.M = M;
  a.K = K;
  a.N = N;
  a.ldx = ldx;
  a.ldw = ldw;
  a.ldo = ldo;
  auto s = static_cast<cudaStream_t>(stream);
  const int sm = info->sm_count;
  using namespace bias_gelu_gemm;
  if (dtype == GEGLU_SM90_BF16) {
    return approximate ? dispatch<cutlass::bfloat16_t, true>(config, a, device, sm, s)
                       : dispatch<cutlass::bfloat16_t, false>(config, a, device, sm, s);
  }
#ifndef LINEAR_GELU_SM90_BF16_ONLY  // a quicker tuning build (tools/sm90_gemm/build_lib.sh)
  return approximate ? dispatch<cutlass::half_t, true>(config, a, device, sm, s)
                     : dispatch<cutlass::half_t, false>(config, a, device, sm, s);
#else
  return GEGLU_SM90_ERR_DTYPE;
#endif
}

}  // extern "C"
