#pragma once
// The ATen ops the per-layer ops run, called through torch's stable ABI.
//
// geglu_stable::aten: shape ops and the few others the per-layer ops need outside
// their GEMMs, through the dispatcher from the top, as at:: calls go (torch::stable
// ops where torch/csrc/stable/ops.h has them, else the dispatcher's boxed entry,
// torch_call_dispatcher, with the op's arguments as StableIValues); geglu_stable::device:
// the GEMMs and adds, through the device's C shim (below). Allocation and views without
// the dispatcher, shared with the backends' kernels: common/device_tensors.h.

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include "common/device_tensors.h"

namespace geglu_stable::aten {

using torch::stable::Tensor;
namespace sd = torch::stable::detail;

template <size_t N>
inline Tensor call(const char *op, const char *overload, std::array<StableIValue, N> &stack) {
  STABLE_TORCH_ERROR_CODE_CHECK(torch_call_dispatcher(op, overload, stack.data(), TORCH_ABI_VERSION));
  return sd::to<Tensor>(stack[0]);
}

inline Tensor zeros_like(const Tensor &like) { return torch::stable::new_zeros(like, like.sizes()); }

inline Tensor reshape(const Tensor &a, torch::headeronly::IntHeaderOnlyArrayRef size) {
  return torch::stable::reshape(a, size);
}

// torch.cat([a, b]) along dim 0.
inline Tensor cat0(const Tensor &a, const Tensor &b) {
  std::vector<Tensor> ts{a, b};
  std::array<StableIValue, 2> s{sd::from(ts), sd::from(int64_t{0})};
  return call("aten::cat", "", s);
}

}  // namespace geglu_stable::aten

// ---------------------------------------------------------------------------------
// The GEMMs of a backend kernel (_geglu_mlp, _geglu_mlp_train: real tensors of this
// build's device, below the dispatcher): AOTInductor's C shim of the backend's own
// kernels (torch/csrc/inductor/aoti_torch/generated/c_shim_<device>.h, the C ABI that
// AOTInductor-compiled models call; its functions are kept across releases), which
// runs the device's structured kernel directly: no dispatcher lookup by name, no boxing,
// no autograd layer. Through torch_call_dispatcher, the same _geglu_mlp call cost about
// 3x the host time of the deleted version-tied build's at:: calls (docs/DESIGN.md, "Stable ABI").
#if defined(CPU_KERNEL)
#include <torch/csrc/inductor/aoti_torch/generated/c_shim_cpu.h>
#define GEGLU_DEVICE_SHIM(name) aoti_torch_cpu_##name
#elif defined(CUDA_KERNEL)
#include <torch/csrc/inductor/aoti_torch/generated/c_shim_cuda.h>
#define GEGLU_DEVICE_SHIM(name) aoti_torch_cuda_##name
#endif

#if defined(GEGLU_DEVICE_SHIM)
namespace geglu_stable::device {

using torch::stable::Tensor;

// out = a @ b
inline void mm_out(Tensor &out, const Tensor &a, const Tensor &b) {
  STABLE_TORCH_ERROR_CODE_CHECK(GEGLU_DEVICE_SHIM(mm_out)(out.get(), a.get(), b.get()));
}

// out = input + a @ b (input broadcast over rows: a bias, or a 2-d residual)
inline void addmm_out(Tensor &out, const Tensor &input, const Tensor &a, const Tensor &b) {
  STABLE_TORCH_ERROR_CODE_CHECK(GEGLU_DEVICE_SHIM(addmm_out)(out.get(), input.get(), a.get(), b.get(), 1.0, 1.0));
}

// x @ w.T + bias for a 2-d x, as a new [M, N] tensor.
inline Tensor linear(const Tensor &x, const Tensor &w, const std::optional<Tensor> &bias) {
  const int64_t shape[2] = {x.size(0), w.size(0)};
  Tensor out = empty(torch::headeronly::IntHeaderOnlyArrayRef(shape, 2), x);
  const Tensor wt = t(w);
  if (bias.has_value()) {
    addmm_out(out, *bias, x, wt);
  } else {
    mm_out(out, x, wt);
  }
  return out;
}

#if defined(CUDA_KERNEL)
// gelu_tanh(x @ w.T + bias) for a 2-d x: cuBLASLt's GELU_BIAS epilogue, one kernel.
inline Tensor addmm_gelu(const Tensor &bias, const Tensor &x, const Tensor &w) {
  AtenTensorHandle ret = nullptr;
  STABLE_TORCH_ERROR_CODE_CHECK(
      aoti_torch_cuda__addmm_activation(bias.get(), x.get(), t(w).get(), 1.0, 1.0, /*use_gelu=*/1, &ret));
  return Tensor(ret);
}
#endif

// a + b
inline Tensor add(const Tensor &a, const Tensor &b) {
  AtenTensorHandle ret = nullptr;
  STABLE_TORCH_ERROR_CODE_CHECK(GEGLU_DEVICE_SHIM(add_Tensor)(a.get(), b.get(), 1.0, &ret));
  return Tensor(ret);
}

}  // namespace geglu_stable::device
#endif
