#pragma once
// The argument checks and the [rows, width] view rule shared by the CUDA backend
// (cuda/ops.cpp) and the CPU backend (cpu/geglu_cpu.cpp); header-only, ATen/c10 only.
// Where the backends differ, the caller says so: the device type its kernels run on,
// and whether a tensor's rows may overlap (RowOverlap).
//
// Every failure raises ValueError (TORCH_CHECK_VALUE) whose message names the op, the
// argument, what was expected and what was got. On the native route these are the
// only checks of a call (activation.py calls the op unchecked), so they cover what
// the package's Python checks (torch-ext/geglu/_checks.py) cover on the other routes.
// The Python side keeps its own copy of the row rule (_checks.row_layout) for the
// Triton path; the two must agree.

#include <cstdint>
#include <string>
#include <string_view>

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>

namespace geglu_checks {

// torch's Python name of a dtype ("torch.float32", "torch.int32").
inline std::string dtype_name(at::ScalarType t) { return "torch." + std::string(c10::getDtypeNames(t).first); }

// `t` is a defined, dense tensor on a `device_type` device.
inline void check_tensor(std::string_view op, std::string_view name, const at::Tensor &t, c10::DeviceType device_type) {
  TORCH_CHECK_VALUE(t.defined(), op, ": ", name, " is an undefined tensor");
  const std::string kind = c10::DeviceTypeName(device_type);
  TORCH_CHECK_VALUE(t.device().type() == device_type, op, ": ", name, " must be a ", kind, " tensor for this (", kind,
                    ") kernel, got device ", t.device());
  TORCH_CHECK_VALUE(t.layout() == at::kStrided, op, ": ", name, " must be a dense (strided) tensor, got layout ",
                    t.layout());
}

// An input of the op: check_tensor, at least one dimension, a dtype the kernels compute in.
inline void check_input(std::string_view op, std::string_view name, const at::Tensor &t, c10::DeviceType device_type) {
  check_tensor(op, name, t, device_type);
  TORCH_CHECK_VALUE(t.dim() >= 1, op, ": ", name, " must have at least one dimension, got a 0-d tensor");
  const at::ScalarType s = t.scalar_type();
  TORCH_CHECK_VALUE(s == at::kFloat || s == at::kBFloat16 || s == at::kHalf, op, ": ", name,
                    " must have dtype torch.float32, torch.bfloat16 or torch.float16, got ", dtype_name(s));
}

// `t` is on the device of, and has the dtype of, the reference tensor `ref`.
inline void check_like(std::string_view op, std::string_view name, const at::Tensor &t, std::string_view ref_name,
                       const at::Tensor &ref) {
  TORCH_CHECK_VALUE(t.device() == ref.device(), op, ": ", name, " must be on the device of ", ref_name, " (",
                    ref.device(), "), got ", t.device());
  TORCH_CHECK_VALUE(t.scalar_type() == ref.scalar_type(), op, ": ", name, " must have the dtype of ", ref_name, " (",
                    dtype_name(ref.scalar_type()), "), got ", dtype_name(t.scalar_type()));
}

// `t` has `shape`, which follows from the reference tensor `ref`.
inline void check_shape(std::string_view op, std::string_view name, const at::Tensor &t, at::IntArrayRef shape,
                        std::string_view ref_name, const at::Tensor &ref) {
  TORCH_CHECK_VALUE(t.sizes() == shape, op, ": ", name, " must have shape ", shape, " (from ", ref_name,
                    " of shape ", ref.sizes(), "), got ", t.sizes());
}

// A tensor that must match `ref`: check_tensor, check_like, check_shape.
inline void check_matches(std::string_view op, std::string_view name, const at::Tensor &t, std::string_view ref_name,
                          const at::Tensor &ref, at::IntArrayRef shape, c10::DeviceType device_type) {
  check_tensor(op, name, t, device_type);
  check_like(op, name, t, ref_name, ref);
  check_shape(op, name, t, shape, ref_name, ref);
}

// A merged [..., 2d] input (gate = t[..., :d], up = t[..., d:]; check_input first); returns d.
inline int64_t merged_half_width(std::string_view op, std::string_view name, const at::Tensor &t) {
  const int64_t two_d = t.size(-1);
  TORCH_CHECK_VALUE(two_d % 2 == 0, op, ": ", name,
                    " must have an even last dimension (gate and up halves, [..., 2d]), got ", two_d);
  return two_d / 2;
}

// approximate="tanh" (true) or "none" (false, the exact erf GELU).
inline bool is_tanh(std::string_view op, std::string_view approximate) {
  if (approximate == "tanh") return true;
  TORCH_CHECK_VALUE(approximate == "none", op, ": approximate must be 'tanh' or 'none', got '", approximate, "'");
  return false;
}

// ---------------------------------------------------------------- [rows, width] views

struct RowMatrix {
  int64_t rows;
  int64_t width;
  int64_t row_stride;  // in elements, between rows r and r + 1
};

// Whether rows may share memory (row stride < width): harmless for a tensor only read
// (the CPU backend reads such inputs), never for one written element by element.
enum class RowOverlap { kAllowed, kRefused };

// A tensor as a [rows, width] matrix without copying (never a hidden copy): stride 1
// along the last dimension, leading dimensions that collapse to one row stride (any
// contiguous tensor, or a column slice x[..., a:b] of one), and, unless `overlap`
// allows it, rows that do not overlap. Size-1 dimensions impose nothing. `t` has at
// least one dimension (an input after check_input, or shaped like one); an empty tensor
// is accepted as it is (nothing is read or written).
inline RowMatrix as_row_matrix(std::string_view op, std::string_view name, const at::Tensor &t,
                               RowOverlap overlap) {
  const int64_t width = t.size(-1);
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < t.dim(); ++d) rows *= t.size(d);
  if (rows == 0 || width == 0) return {rows, width, width};
  TORCH_CHECK_VALUE(width == 1 || t.stride(-1) == 1, op, ": ", name,
                    " must have stride 1 in its last dimension, got strides ", t.strides(), " for shape ", t.sizes(),
                    " (call .contiguous() first)");
  // Walk the leading dimensions from the innermost out: the first one of size > 1
  // sets the row stride, each further one must step over all rows inside it.
  int64_t row_stride = -1;
  int64_t inner_rows = 1;
  for (int64_t d = t.dim() - 2; d >= 0; --d) {
    if (t.size(d) == 1) continue;
    if (row_stride < 0) {
      row_stride = t.stride(d);
    } else {
      TORCH_CHECK_VALUE(t.stride(d) == row_stride * inner_rows, op, ": ", name,
                        " must be a row-strided matrix: its leading dimensions must collapse to one row stride, "
                        "got strides ",
                        t.strides(), " for shape ", t.sizes(), " (call .contiguous() first)");
    }
    inner_rows *= t.size(d);
  }
  if (row_stride < 0) row_stride = width;  // a single row
  TORCH_CHECK_VALUE(overlap == RowOverlap::kAllowed || rows == 1 || row_stride >= width, op, ": ", name,
                    " must have non-overlapping rows (row stride >= width, its last dimension), got row stride ",
                    row_stride, " for width ", width, " (strides ", t.strides(), ", shape ", t.sizes(), ")");
  return {rows, width, row_stride};
}

}  // namespace geglu_checks
