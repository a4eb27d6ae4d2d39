#pragma once
// Tensors made and viewed without the dispatcher, over torch's stable ABI and the
// AOTInductor C shim (aoti_torch_empty_strided, aoti_torch__reinterpret_tensor): the
// allocations and views of both backends' kernels and of the per-layer ops
// (torch-ext/), which run below the dispatcher on real tensors of this build's device.
// Header-only. The ATen ops those layers run (GEMMs, cat) are geglu_kernels/ops/aten.h's.

#include <cstddef>
#include <cstdint>
#include <optional>

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/util/HeaderOnlyArrayRef.h>

namespace geglu_stable::device {

using torch::stable::Tensor;

// A device made current until the end of the scope, DeviceGuard guard(t.get_device_index()):
// the C-shim GEMMs (geglu_kernels/ops/aten.h) and the backend's own launches run without the
// dispatcher's device guard. torch's guard is made only where the device is not current
// already: a model's layers run on the current device, and the guard's exchange and
// restore were a measurable part of a decode MLP call's host time (docs/DESIGN.md,
// "Host time"). CPU: nothing to set.
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
// microseconds of host time per call: docs/DESIGN.md, "Host time"): where t's leading dimensions
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

}  // namespace geglu_stable::device
