#pragma once
// The argument checks and the [rows, width] view rule of both backends, over torch's
// stable ABI (torch/csrc/stable, torch/headeronly), with the messages of the package's
// Python checks (torch-ext/geglu/_checks.py). Header-only.
//
// Every failure throws std::invalid_argument, which torch turns into a Python
// ValueError; its message names
// the op, the argument, what was expected and what was got. torch's own names are
// written out here (dtypes as "torch.float32", devices as "cpu" / "cuda:0", shapes as
// "[4, 40]"), since the stable ABI has no printers for them.

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <torch/csrc/stable/device.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/DeviceType.h>
#include <torch/headeronly/core/Layout.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/HeaderOnlyArrayRef.h>

namespace geglu_stable {

using Tensor = torch::stable::Tensor;
using ScalarType = torch::headeronly::ScalarType;
using DeviceType = torch::headeronly::DeviceType;
using IntArrayRef = torch::headeronly::IntHeaderOnlyArrayRef;

// ---------------------------------------------------------------- printing

inline std::ostream &operator<<(std::ostream &o, IntArrayRef s) {
  o << "[";
  for (size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
  return o << "]";
}

// "(24,)", "(4, 40)": a shape as Python prints a tuple.
inline std::string py_shape(IntArrayRef s) {
  std::ostringstream o;
  o << "(";
  for (size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
  o << (s.size() == 1 ? ",)" : ")");
  return o.str();
}

// torch's Python name of a dtype ("torch.float32", "torch.int32").
inline std::string dtype_name(ScalarType t) {
  const char *name = nullptr;
  switch (t) {
    case ScalarType::Byte: name = "uint8"; break;
    case ScalarType::Char: name = "int8"; break;
    case ScalarType::Short: name = "int16"; break;
    case ScalarType::Int: name = "int32"; break;
    case ScalarType::Long: name = "int64"; break;
    case ScalarType::Half: name = "float16"; break;
    case ScalarType::Float: name = "float32"; break;
    case ScalarType::Double: name = "float64"; break;
    case ScalarType::ComplexHalf: name = "complex32"; break;
    case ScalarType::ComplexFloat: name = "complex64"; break;
    case ScalarType::ComplexDouble: name = "complex128"; break;
    case ScalarType::Bool: name = "bool"; break;
    case ScalarType::BFloat16: name = "bfloat16"; break;
    case ScalarType::Float8_e5m2: name = "float8_e5m2"; break;
    case ScalarType::Float8_e4m3fn: name = "float8_e4m3fn"; break;
    case ScalarType::UInt16: name = "uint16"; break;
    case ScalarType::UInt32: name = "uint32"; break;
    case ScalarType::UInt64: name = "uint64"; break;
    default: return "torch." + std::string(torch::headeronly::toString(t));
  }
  return std::string("torch.") + name;
}

// A device type as torch.device spells it ("cpu", "cuda", "meta").
inline const char *device_type_name(DeviceType t) {
  switch (t) {
    case DeviceType::CPU: return "cpu";
    case DeviceType::CUDA: return "cuda";
    case DeviceType::Meta: return "meta";
    case DeviceType::MPS: return "mps";
    case DeviceType::XPU: return "xpu";
    case DeviceType::HIP: return "hip";
    case DeviceType::PrivateUse1: return "privateuseone";
    default: return "other";
  }
}

// "cpu", "cuda:0": a device as torch prints it.
inline std::string device_name(const torch::stable::Device &d) {
  std::string s = device_type_name(d.type());
  if (d.has_index()) s += ":" + std::to_string(d.index());
  return s;
}

inline std::string layout_name(torch::headeronly::Layout l) {
  switch (l) {
    case torch::headeronly::Layout::Strided: return "Strided";
    case torch::headeronly::Layout::Sparse: return "Sparse";
    case torch::headeronly::Layout::SparseCsr: return "SparseCsr";
    case torch::headeronly::Layout::Mkldnn: return "Mkldnn";
    case torch::headeronly::Layout::Jagged: return "Jagged";
    default: return "other";
  }
}

inline bool same_device(const Tensor &a, const Tensor &b) {
  const torch::stable::Device da = a.device(), db = b.device();
  return da.type() == db.type() && da.index() == db.index();
}

inline bool same_shape(IntArrayRef a, IntArrayRef b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return false;
  }
  return true;
}

// ---------------------------------------------------------------- raising

template <typename... Args>
[[noreturn]] inline void throw_value_error(const Args &...args) {
  std::ostringstream o;
  (o << ... << args);
  throw std::invalid_argument(o.str());
}

// CHECK_VALUE(cond, message parts...): ValueError(message) unless cond.
#define GEGLU_CHECK_VALUE(cond, ...)                    \
  do {                                                  \
    if (!(cond)) ::geglu_stable::throw_value_error(__VA_ARGS__); \
  } while (0)

// ---------------------------------------------------------------- checks

// `t` is a defined, dense tensor on a `device_type` device.
inline void check_tensor(std::string_view op, std::string_view name, const Tensor &t, DeviceType device_type) {
  GEGLU_CHECK_VALUE(t.defined(), op, ": ", name, " is an undefined tensor");
  std::string kind = device_type_name(device_type);
  for (char &c : kind) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  GEGLU_CHECK_VALUE(t.device().type() == device_type, op, ": ", name, " must be a ", kind, " tensor for this (",
                    kind, ") kernel, got device ", device_name(t.device()));
  GEGLU_CHECK_VALUE(t.layout() == torch::headeronly::Layout::Strided, op, ": ", name,
                    " must be a dense (strided) tensor, got layout ", layout_name(t.layout()));
}

// An input of the op: check_tensor, at least one dimension, a dtype the kernels compute in.
inline void check_input(std::string_view op, std::string_view name, const Tensor &t, DeviceType device_type) {
  check_tensor(op, name, t, device_type);
  GEGLU_CHECK_VALUE(t.dim() >= 1, op, ": ", name, " must have at least one dimension, got a 0-d tensor");
  const ScalarType s = t.scalar_type();
  GEGLU_CHECK_VALUE(s == ScalarType::Float || s == ScalarType::BFloat16 || s == ScalarType::Half, op, ": ", name,
                    " must have dtype torch.float32, torch.bfloat16 or torch.float16, got ", dtype_name(s));
}

// `t` is on the device of, and has the dtype of, the reference tensor `ref`.
inline void check_like(std::string_view op, std::string_view name, const Tensor &t, std::string_view ref_name,
                       const Tensor &ref) {
  GEGLU_CHECK_VALUE(same_device(t, ref), op, ": ", name, " must be on the device of ", ref_name, " (",
                    device_name(ref.device()), "), got ", device_name(t.device()));
  GEGLU_CHECK_VALUE(t.scalar_type() == ref.scalar_type(), op, ": ", name, " must have the dtype of ", ref_name, " (",
                    dtype_name(ref.scalar_type()), "), got ", dtype_name(t.scalar_type()));
}

// `t` has `shape`, which follows from the reference tensor `ref`.
inline void check_shape(std::string_view op, std::string_view name, const Tensor &t, IntArrayRef shape,
                        std::string_view ref_name, const Tensor &ref) {
  GEGLU_CHECK_VALUE(same_shape(t.sizes(), shape), op, ": ", name, " must have shape ", shape, " (from ", ref_name,
                    " of shape ", ref.sizes(), "), got ", t.sizes());
}

// A tensor that must match `ref`: check_tensor, check_like, check_shape.
inline void check_matches(std::string_view op, std::string_view name, const Tensor &t, std::string_view ref_name,
                          const Tensor &ref, IntArrayRef shape, DeviceType device_type) {
  check_tensor(op, name, t, device_type);
  check_like(op, name, t, ref_name, ref);
  check_shape(op, name, t, shape, ref_name, ref);
}

// A merged [..., 2d] input (gate = t[..., :d], up = t[..., d:]; check_input first); returns d.
inline int64_t merged_half_width(std::string_view op, std::string_view name, const Tensor &t) {
  const int64_t two_d = t.size(-1);
  GEGLU_CHECK_VALUE(two_d % 2 == 0, op, ": ", name,
                    " must have an even last dimension (gate and up halves, [..., 2d]), got ", two_d);
  return two_d / 2;
}

// The merged ops called as op(input, out): `out` then has input's leading dimensions
// and twice its width, which the shape checks would blame on one argument alone.
inline void check_not_swapped(std::string_view op, const Tensor &out, const Tensor &input) {
  if (!out.defined() || !input.defined() || out.dim() != input.dim() || input.dim() == 0) return;
  const IntArrayRef o = out.sizes(), in = input.sizes();
  for (size_t i = 0; i + 1 < o.size(); ++i) {
    if (o[i] != in[i]) return;
  }
  GEGLU_CHECK_VALUE(in.back() == 0 || o.back() != 2 * in.back(), op, ": out of shape ", o,
                    " is twice as wide as input of shape ", in, ": the arguments look swapped; the signature is ", op,
                    "(out, input), with input [..., 2d] and out [..., d]");
}

// approximate="tanh" (true) or "none" (false, the exact erf GELU).
inline bool is_tanh(std::string_view op, std::string_view approximate) {
  if (approximate == "tanh") return true;
  GEGLU_CHECK_VALUE(approximate == "none", op, ": approximate must be 'tanh' or 'none', got '", approximate, "'");
  return false;
}

// Whether `out` and `in` share some memory without being the same view: the bytes each
// one spans overlap, and they differ in base address, sizes or strides. (The stable ABI
// has no storage identity; address ranges are what at::get_overlap_status compares too
// for two tensors of one storage.)
inline bool partially_overlaps(const Tensor &out, const Tensor &in) {
  if (out.numel() == 0 || in.numel() == 0) return false;
  auto span = [](const Tensor &t) {
    int64_t last = 0;
    for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
    const auto *base = static_cast<const char *>(t.data_ptr());
    return std::pair<const char *, const char *>(base, base + (last + 1) * static_cast<int64_t>(t.element_size()));
  };
  const auto [a0, a1] = span(out);
  const auto [b0, b1] = span(in);
  if (a1 <= b0 || b1 <= a0) return false;
  const bool same_view = a0 == b0 && same_shape(out.sizes(), in.sizes()) && same_shape(out.strides(), in.strides());
  return !same_view;
}

// `out` may be `input` itself (in place, element by element), but not a different
// view that shares some of its memory: those elements would be read after written.
inline void check_no_partial_overlap(std::string_view op, const Tensor &out, const Tensor &input) {
  GEGLU_CHECK_VALUE(!partially_overlaps(out, input), op,
                    ": `out` partially overlaps `input` in memory; pass a separate tensor",
                    " (or, where shapes allow, `input` itself to compute in place)");
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

// A tensor as a [rows, width] matrix without copying: the rule of tensor_checks.h's
// as_row_matrix (stride 1 along the last dimension, leading dimensions that collapse to
// one row stride, non-overlapping rows unless `overlap` allows them).
inline RowMatrix as_row_matrix(std::string_view op, std::string_view name, const Tensor &t, RowOverlap overlap) {
  const int64_t width = t.size(-1);
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < t.dim(); ++d) rows *= t.size(d);
  if (rows == 0 || width == 0) return {rows, width, width};
  GEGLU_CHECK_VALUE(width == 1 || t.stride(-1) == 1, op, ": ", name,
                    " must have stride 1 in its last dimension, got strides ", t.strides(), " for shape ", t.sizes(),
                    " (call .contiguous() first)");
  int64_t row_stride = -1;
  int64_t inner_rows = 1;
  for (int64_t d = t.dim() - 2; d >= 0; --d) {
    if (t.size(d) == 1) continue;
    if (row_stride < 0) {
      row_stride = t.stride(d);
    } else {
      GEGLU_CHECK_VALUE(t.stride(d) == row_stride * inner_rows, op, ": ", name,
                        " must be a row-strided matrix: its leading dimensions must collapse to one row stride, "
                        "got strides ",
                        t.strides(), " for shape ", t.sizes(), " (call .contiguous() first)");
    }
    inner_rows *= t.size(d);
  }
  if (row_stride < 0) row_stride = width;  // a single row
  GEGLU_CHECK_VALUE(overlap == RowOverlap::kAllowed || rows == 1 || row_stride >= width, op, ": ", name,
                    " must have non-overlapping rows (row stride >= width, its last dimension), got row stride ",
                    row_stride, " for width ", width, " (strides ", t.strides(), ", shape ", t.sizes(), ")");
  return {rows, width, row_stride};
}

}  // namespace geglu_stable
