// The GeGLU gate/up for a few tokens on Hopper (sm_90a), swap-AB: the C launcher of the
// kernel in geglu_swapab_sm90.cuh (the design is there; geglu_swapab_sm90.h has the ABI).

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "cutlass/cutlass.h"
#include "cutlass/kernel_hardware_info.h"

#include "geglu_swapab_sm90.h"
#include "geglu_swapab_sm90.cuh"
#include "sm90_launcher.cuh"

namespace geglu_swapab {

using namespace cute;

struct LaunchArgs {
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
};

template <class Gemm>
int run(LaunchArgs const& a, int device, int sm_count, cudaStream_t stream) {
  using Kernel = typename Gemm::Kernel;
  using Element = typename Gemm::Epilogue::Element;
  auto make_arguments = [device, sm_count](LaunchArgs const& a) {
    typename Kernel::Arguments args{};
    args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
    args.problem_shape = make_shape(int(2 * a.H), int(a.M), int(a.K), 1);
    auto& ml = args.mainloop;
    ml.ptr_Ag = static_cast<Element const*>(a.wg);
    ml.ptr_Au = static_cast<Element const*>(a.wu);
    ml.dA = make_stride(a.ldw, Int<1>{}, a.H * a.ldw);
    ml.ptr_B = static_cast<Element const*>(a.x);
    ml.dB = make_stride(a.ldx, Int<1>{}, a.M * a.ldx);
    auto& ep = args.epilogue;
    ep.ptr_out = static_cast<Element*>(a.out);
    ep.ldo = a.ldo;
    ep.bias_g = static_cast<Element const*>(a.bg);
    ep.bias_u = static_cast<Element const*>(a.bu);
    ep.approximate = a.approximate;
    args.hw_info.device_id = device;
    args.hw_info.sm_count = sm_count;
    return args;
  };
  return sm90_launcher::status_of(sm90_launcher::Runner<Kernel, 1, 1, LaunchArgs>::run(a, device, stream, make_arguments));
}

}  // namespace geglu_swapab

extern "C" int geglu_swapab_sm90(const void* x, int64_t M, int64_t K, int64_t ldx, const void* w_gate,
                                 const void* w_up, int64_t ldw, const void* b_gate, const void* b_up, void* out,
                                 int64_t H, int64_t ldo, int dtype, int approximate, void* stream) {
  if (dtype != GEGLU_SM90_BF16 && dtype != GEGLU_SM90_FP16) return GEGLU_SM90_ERR_DTYPE;
  constexpr int64_t kMax = (int64_t(1) << 31) - 1;
  // 2H is the problem M (int32).
  if (M < 0 || K < 1 || H < 1 || M > kMax || K > kMax || 2 * H > kMax) return GEGLU_SM90_ERR_SHAPE;
  if (ldx < K || ldw < K || ldo < H) return GEGLU_SM90_ERR_SHAPE;
  if (M == 0) return GEGLU_SM90_OK;
  if ((K * 2) % 16 || (ldx * 2) % 16 || (ldw * 2) % 16) return GEGLU_SM90_ERR_STRIDE;
  auto misaligned = [](const void* p, uintptr_t bytes) { return (reinterpret_cast<uintptr_t>(p) & (bytes - 1)) != 0; };
  if (x == nullptr || w_gate == nullptr || w_up == nullptr || out == nullptr) return GEGLU_SM90_ERR_ALIGN;
  if (misaligned(x, 16) || misaligned(w_gate, 16) || misaligned(w_up, 16) || misaligned(out, 2) ||
      misaligned(b_gate, 2) || misaligned(b_up, 2)) {
    return GEGLU_SM90_ERR_ALIGN;
  }
  int device = 0;
  sm90_launcher::DeviceInfo const* info = sm90_launcher::current_sm90_device(&device);
  if (info == nullptr) return GEGLU_SM90_ERR_DEVICE;
  geglu_swapab::LaunchArgs a;  // the params-cache key: zeroed, padding included
  std::memset(&a, 0, sizeof a);
  a.x = x, a.M = M, a.K = K, a.ldx = ldx;
  a.wg = w_gate, a.wu = w_up, a.ldw = ldw, a.bg = b_gate, a.bu = b_up;
  a.out = out, a.H = H, a.ldo = ldo;
  a.approximate = approximate ? 1 : 0;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (dtype == GEGLU_SM90_BF16) {
    return geglu_swapab::run<geglu_swapab::SwapAbGemm<cutlass::bfloat16_t>>(a, device, info->sm_count, s);
  }
  return geglu_swapab::run<geglu_swapab::SwapAbGemm<cutlass::half_t>>(a, device, info->sm_count, s);
}
