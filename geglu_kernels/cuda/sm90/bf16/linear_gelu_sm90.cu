// Bias + GELU linear for Hopper (sm_90a) on CUTLASS 3.x: kernels and the C launcher
// (ABI: linear_gelu_sm90.h).
//
// A stock warp-specialized TMA GEMM (CollectiveBuilder mainloop) whose epilogue computes
// gelu(acc + bias[n]) in registers and stores 16 B per thread: the GeGLU engine's
// register-level epilogue (geglu_gemm_sm90.cuh) with kGated = false. CUTLASS's own
// fusion epilogue (LinCombPerColBiasEltAct, through shared memory and TMA stores) was
// the first version: it issued twice cuBLASLt's instructions and left the GELU exposed
// (docs/DESIGN.md, "Alternatives that lost"). The GELU is gelu_math.cuh's, the
// one the package's elementwise kernels use, so every route rounds the same function.
// Nothing but x, W and the bias is read.
//
// Build: part of the geglu_gemm_sm90 kernel of build.toml (sm_90a only).

#include "sm90/bf16/linear_gelu_sm90.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "cutlass/cutlass.h"
#include "cutlass/kernel_hardware_info.h"
#include "cutlass/gemm/gemm.h"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"

#include "sm90/bf16/geglu_gemm_sm90.cuh"
#include "sm90/common/sm90_launcher.cuh"

namespace bias_gelu_gemm {

using namespace cute;

// The GeGLU engine's epilogue without the gating, under its own name: profilers and
// the route tests tell this kernel from the GeGLU engine by it.
template <class Element, int BN>
struct BiasGeluEpilogue : geglu_sm90::GegluEpilogue<Element, BN, /*kGated=*/false> {
  using geglu_sm90::GegluEpilogue<Element, BN, false>::GegluEpilogue;
};

template <class Element, int BM, int BN, class Schedule, int ClusterM, int ClusterN>
struct LinearGelu {
  using TileShape = Shape<Int<BM>, Int<BN>, _64>;
  using ClusterShape = Shape<Int<ClusterM>, Int<ClusterN>, _1>;
  using Epilogue = BiasGeluEpilogue<Element, BN>;
  using CollectiveEpilogue = cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<Epilogue>;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
      Element, cutlass::layout::RowMajor, 8,     // A = x [M, K]
      Element, cutlass::layout::ColumnMajor, 8,  // B = W [N, K]
      float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<
          static_cast<int>(sizeof(typename CollectiveEpilogue::TensorStorage))>,
      Schedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, CollectiveEpilogue,
                                                      cutlass::gemm::PersistentScheduler>;
};

struct LaunchArgs {  // the params-cache key: zeroed, padding included, before it is filled
  const void* x;
  const void* w;
  const void* bias;
  void* out;
  int64_t M, K, N, ldx, ldw, ldo;
  int approximate;
};

template <class Gemm>
int run(LaunchArgs const& a, cudaStream_t stream) {
  using Element = typename Gemm::Kernel::ElementA;
  auto fill = [](auto& args, LaunchArgs const& a) {
    args.problem_shape = make_shape(int(a.M), int(a.N), int(a.K), 1);
    args.mainloop.ptr_A = static_cast<Element const*>(a.x);
    args.mainloop.dA = make_stride(a.ldx, Int<1>{}, a.M * a.ldx);
    args.mainloop.ptr_B = static_cast<Element const*>(a.w);
    args.mainloop.dB = make_stride(a.ldw, Int<1>{}, a.N * a.ldw);
    args.epilogue.ptr_out = static_cast<Element*>(a.out);
    args.epilogue.ldo = a.ldo;
    args.epilogue.bias_g = static_cast<Element const*>(a.bias);
    args.epilogue.approximate = a.approximate;
  };
  constexpr int cm = size<0>(typename Gemm::ClusterShape{});
  constexpr int cn = size<1>(typename Gemm::ClusterShape{});
  return sm90_launcher::launch_gemm_on_current_device<typename Gemm::Kernel, cm, cn>(a, stream, fill);
}

using cutlass::gemm::KernelTmaWarpSpecializedPingpong;

// One kernel: pingpong 128x128x64, cluster 2x1. It beat the cooperative 128x256 and
// 256x128 tiles and the smaller ones at the BERT / GPT-2 / T5 intermediate shapes; at 64
// tokens every tile loses to cuBLAS, which the router keeps up to 128 tokens
// (fused_gemm_router.cpp; the numbers: docs/DESIGN.md, "GEMMs").
template <class Element>
using LinearGelu128x128 = LinearGelu<Element, 128, 128, KernelTmaWarpSpecializedPingpong, 2, 1>;

}  // namespace bias_gelu_gemm

extern "C" {

int linear_gelu_sm90(const void* x, int64_t M, int64_t K, int64_t ldx,
                     const void* w, int64_t N, int64_t ldw, const void* bias,
                     void* out, int64_t ldo, int dtype, int approximate, void* stream) {
  if (int status = sm90_launcher::check_dtype_and_extents(dtype, M, N, K)) return status;
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
  bias_gelu_gemm::LaunchArgs a;
  std::memset(&a, 0, sizeof a);
  a.x = x, a.w = w, a.bias = bias, a.out = out;
  a.M = M, a.K = K, a.N = N, a.ldx = ldx, a.ldw = ldw, a.ldo = ldo;
  a.approximate = approximate != 0;
  auto s = static_cast<cudaStream_t>(stream);
  using namespace bias_gelu_gemm;
  if (dtype == GEGLU_SM90_BF16) return run<LinearGelu128x128<cutlass::bfloat16_t>>(a, s);
  return run<LinearGelu128x128<cutlass::half_t>>(a, s);
}

}  // extern "C"
