// The GeGLU gate/up for a few tokens on Hopper (sm_90a), swap-AB: the C launcher of the
// kernel in geglu_swapab_sm90.cuh (the design is there; geglu_swapab_sm90.h has the ABI).

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "cutlass/cutlass.h"
#include "cutlass/kernel_hardware_info.h"

#include "sm90/common/gate_up_launch.cuh"
#include "sm90/bf16/geglu_swapab_sm90.h"
#include "sm90/bf16/geglu_swapab_sm90.cuh"
#include "sm90/common/sm90_launcher.cuh"

namespace geglu_swapab {

using namespace cute;

using gate_up_launch::LaunchArgs;

template <class Gemm>
int run(LaunchArgs const& a, cudaStream_t stream) {
  using Element = typename Gemm::Epilogue::Element;
  auto fill = [](auto& args, LaunchArgs const& a) {
    args.problem_shape = make_shape(int(2 * a.H), int(a.M), int(a.K), 1);
    auto& ml = args.mainloop;
    ml.ptr_Ag = static_cast<Element const*>(a.wg);
    ml.ptr_Au = static_cast<Element const*>(a.wu);
    ml.dA = make_stride(a.ldw, Int<1>{}, a.H * a.ldw);
    ml.ptr_B = static_cast<Element const*>(a.x);
    ml.dB = make_stride(a.ldx, Int<1>{}, a.M * a.ldx);
    gate_up_launch::set_epilogue<Element>(args.epilogue, a);
  };
  return sm90_launcher::launch_gemm_on_current_device<typename Gemm::Kernel>(a, stream, fill);
}

}  // namespace geglu_swapab

extern "C" int geglu_swapab_sm90(const void* x, int64_t M, int64_t K, int64_t ldx, const void* w_gate,
                                 const void* w_up, int64_t ldw, const void* b_gate, const void* b_up, void* out,
                                 int64_t H, int64_t ldo, int dtype, int approximate, void* stream) {
  // 2H is the problem M (int32).
  if (int status = gate_up_launch::check_shapes(dtype, M, K, H, ldx, ldw, ldo)) return status;
  if (M == 0) return GEGLU_SM90_OK;
  if ((K * 2) % 16 || (ldx * 2) % 16 || (ldw * 2) % 16) return GEGLU_SM90_ERR_STRIDE;
  auto misaligned = [](const void* p, uintptr_t bytes) { return (reinterpret_cast<uintptr_t>(p) & (bytes - 1)) != 0; };
  if (x == nullptr || w_gate == nullptr || w_up == nullptr || out == nullptr) return GEGLU_SM90_ERR_ALIGN;
  if (misaligned(x, 16) || misaligned(w_gate, 16) || misaligned(w_up, 16) || misaligned(out, 2) ||
      misaligned(b_gate, 2) || misaligned(b_up, 2)) {
    return GEGLU_SM90_ERR_ALIGN;
  }
  geglu_swapab::LaunchArgs a;
  gate_up_launch::make_key(&a, x, M, K, ldx, w_gate, w_up, ldw, b_gate, b_up, out, H, ldo, approximate);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (dtype == GEGLU_SM90_BF16) return geglu_swapab::run<geglu_swapab::SwapAbGemm<cutlass::bfloat16_t>>(a, s);
  return geglu_swapab::run<geglu_swapab::SwapAbGemm<cutlass::half_t>>(a, s);
}
