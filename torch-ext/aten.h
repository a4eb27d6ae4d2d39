#pragma once
// The ATen ops the per-layer ops run, called through torch's stable ABI.
//
// geglu_stable::aten: shape ops and the few others the per-layer ops need outside
// their GEMMs, through the dispatcher from the top, as at:: calls go (torch::stable
// ops where torch/csrc/stable/ops.h has them, else the dispatcher's boxed entry,
// torch_call_dispatcher, with the op's arguments as StableIValues).

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

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

// A device made current until the end of the scope, DeviceGuard guard(t.get_device_index()):
// the C-shim GEMMs below and the backend's own launches run without the dispatcher's
// device guard. torch's guard is made only where the device is not current already: its
// creation, device exchange and restore were ~0.5 us of a decode MLP call's host time on
// an H200 host (benchmarks/results/h200/session17/host_profile_16.log), and a model's
// layers run on the current device. CPU: nothing to set.
#if defined(CUDA_KERNEL)
class DeviceGuard {
 public:
  explicit DeviceGuard(int32_t index) {
    if (torch::stable::accelerator::getCurrentDeviceIndex() != index) guard_.emplace(index);
  }

 private:
  std::optional<torch::stable::accelerator::DeviceGuard> guard_;
};
#else
struct DeviceGuard {
  explicit DeviceGuard(int32_t) {}
};
#endif

// The row-major (contiguous) strides of `sizes`, into `strides` (kMaxDim entries).
constexpr size_t kMaxDim = 8;
inline void contiguous_strides(torch::headeronly::IntHeaderOnlyArrayRef sizes, int64_t *strides) {
  STD_TORCH_CHECK(sizes.size() <= kMaxDim, "geglu: more than 8 dimensions");
  int64_t step = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = step;
    step *= sizes[i] > 1 ? sizes[i] : 1;
  }
}

// A new contiguous tensor of `sizes` with the dtype and device of `like`:
// aoti_torch_empty_strided, the allocator without the dispatcher (the stable
// new_empty goes through at::new_empty's dispatch, autograd layer included).
inline Tensor empty(torch::headeronly::IntHeaderOnlyArrayRef sizes, const Tensor &like) {
  int64_t strides[kMaxDim];
  contiguous_strides(sizes, strides);
  int32_t dtype = 0, device_type = 0, device_index = 0;
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_dtype(like.get(), &dtype));
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_device_type(like.get(), &device_type));
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_device_index(like.get(), &device_index));
  AtenTensorHandle ret = nullptr;
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_empty_strided(static_cast<int64_t>(sizes.size()), sizes.data(), strides,
                                                         dtype, device_type, device_index, &ret));
  return Tensor(ret);
}

// A view of t's storage with these sizes and strides, starting `offset` elements past t's
// own first element (aoti_torch__reinterpret_tensor, whose offset adds to t's storage
// offset: at::_reinterpret_tensor's offset_increment; no dispatcher, no autograd view
// tracking: the views below are internal to a kernel, or its fresh output).
inline Tensor restride(const Tensor &t, int64_t ndim, const int64_t *sizes, const int64_t *strides, int64_t offset) {
  AtenTensorHandle ret = nullptr;
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch__reinterpret_tensor(t.get(), ndim, sizes, strides, offset, &ret));
  return Tensor(ret);
}

// t [..., n] as a [rows, n] view, without the dispatcher (torch.reshape through it costs
// ~8 us of host time per call on the lent H100 host): where t's leading dimensions
// collapse to one row stride, as they do for any tensor with contiguous rows; else
// std::nullopt (the caller reshapes through the dispatcher, which may copy).
inline std::optional<Tensor> rows_view(const Tensor &t) {
  const int64_t ndim = t.dim();
  const int64_t n = t.size(ndim - 1);
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < ndim; ++d) rows *= t.size(d);
  int64_t row_stride = -1, inner = 1;
  for (int64_t d = ndim - 2; d >= 0; --d) {
    if (t.size(d) == 1) continue;
    if (row_stride < 0) {
      row_stride = t.stride(d);
    } else if (t.stride(d) != row_stride * inner) {
      return std::nullopt;
    }
    inner *= t.size(d);
  }
  if (row_stride < 0 || rows == 0) row_stride = n;
  const int64_t sizes[2] = {rows, n};
  const int64_t strides[2] = {row_stride, t.stride(ndim - 1)};
  return restride(t, 2, sizes, strides, 0);
}

// A contiguous tensor viewed with other sizes of the same element count.
inline Tensor contiguous_view(const Tensor &t, torch::headeronly::IntHeaderOnlyArrayRef sizes) {
  int64_t strides[kMaxDim];
  contiguous_strides(sizes, strides);
  return restride(t, static_cast<int64_t>(sizes.size()), sizes.data(), strides, 0);
}

// w.t() of a 2-d tensor.
inline Tensor t(const Tensor &w) {
  const int64_t sizes[2] = {w.size(1), w.size(0)};
  const int64_t strides[2] = {w.stride(1), w.stride(0)};
  return restride(w, 2, sizes, strides, 0);
}

// a.narrow(dim, start, length) of a 1-d or 2-d tensor.
inline Tensor narrow(const Tensor &a, int64_t dim, int64_t start, int64_t length) {
  const int64_t ndim = a.dim();
  STD_TORCH_CHECK(ndim == 1 || ndim == 2, "geglu: narrow of a ", ndim, "-d tensor");
  int64_t sizes[2], strides[2];
  for (int64_t d = 0; d < ndim; ++d) {
    sizes[d] = a.size(d);
    strides[d] = a.stride(d);
  }
  sizes[dim] = length;
  return restride(a, ndim, sizes, strides, start * strides[dim]);
}

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
