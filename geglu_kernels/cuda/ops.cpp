// The CUDA ops of torch_binding.h: argument checks, the [rows, width] view of each
// tensor (never a hidden copy), then one launch of the elementwise kernel
// (geglu_cuda.cu) on the current stream of the tensors' device.
//
// Bad input raises ValueError (TORCH_CHECK_VALUE) whose message names the op, the
// argument and what was expected, like the package's Python checks (_checks.py).

#include <string_view>
#include <tuple>
#include <vector>

#include <ATen/MemoryOverlap.h>
#include <c10/cuda/CUDAGuard.h>

#include "rowwise.h"
#include "torch_binding.h"

namespace geglu_cuda {
namespace {

void check_input(const char *op, const char *name, const at::Tensor &t) {
  TORCH_CHECK_VALUE(t.is_cuda(), op, ": ", name, " must be a CUDA tensor, got device ", t.device());
  const auto s = t.scalar_type();
  TORCH_CHECK_VALUE(s == at::kFloat || s == at::kHalf || s == at::kBFloat16, op, ": ", name,
                    " must have dtype float32/float16/bfloat16, got ", s);
}

// `t` is on the device of, and has the dtype of, the op's first tensor `ref`.
void check_like(const char *op, const char *name, const at::Tensor &t, const char *ref_name, const at::Tensor &ref) {
  TORCH_CHECK_VALUE(t.device() == ref.device(), op, ": ", name, " must be on the device of ", ref_name, " (",
                    ref.device(), "), got ", t.device());
  TORCH_CHECK_VALUE(t.scalar_type() == ref.scalar_type(), op, ": ", name, " must have the dtype of ", ref_name,
                    " (", ref.scalar_type(), "), got ", t.scalar_type());
}

void check_shape(const char *op, const char *name, const at::Tensor &t, at::IntArrayRef shape) {
  TORCH_CHECK_VALUE(t.sizes() == shape, op, ": ", name, " must have shape ", shape, ", got ", t.sizes());
}

// A tensor as a [rows, width] matrix without copying: stride 1 along the last
// dimension, leading dimensions that collapse to one row stride, rows that do not
// overlap. Size-1 dimensions impose nothing. (Same rule as _checks.row_layout.)
struct RowMatrix {
  int64_t rows;
  int64_t width;
  int64_t row_stride;
};

RowMatrix as_row_matrix(const char *op, const char *name, const at::Tensor &t) {
  const int64_t dim = t.dim();
  const int64_t width = dim == 0 ? 1 : t.size(-1);
  TORCH_CHECK_VALUE(dim == 0 || width <= 1 || t.stride(-1) == 1, op, ": ", name,
                    " must have stride 1 in its last dimension, got strides ", t.strides(), " for shape ",
                    t.sizes(), " (call .contiguous() first)");
  int64_t rows = 1;
  int64_t row_stride = -1;
  for (int64_t d = dim - 2; d >= 0; --d) {
    if (t.size(d) == 1) continue;
    if (row_stride < 0) {
      row_stride = t.stride(d);
    } else {
      TORCH_CHECK_VALUE(t.stride(d) == row_stride * rows, op, ": ", name,
                        " must be a row-strided matrix: its leading dimensions must collapse to one row "
                        "stride, got strides ",
                        t.strides(), " for shape ", t.sizes(), " (call .contiguous() first)");
    }
    rows *= t.size(d);
  }
  if (row_stride < 0) row_stride = width;  // a single row
  TORCH_CHECK_VALUE(rows <= 1 || width == 0 || row_stride >= width, op, ": ", name,
                    " must have non-overlapping rows (row stride >= last dimension), got strides ", t.strides(),
                    " for shape ", t.sizes());
  return {rows, width, row_stride};
}

bool is_tanh(const char *op, std::string_view approximate) {
  if (approximate == "tanh") return true;
  TORCH_CHECK_VALUE(approximate == "none", op, ": approximate must be 'tanh' or 'none', got '", approximate, "'");
  return false;
}

void check_out(const char *op, const at::Tensor &out, const at::Tensor &input, at::IntArrayRef shape) {
  TORCH_CHECK_VALUE(out.is_cuda(), op, ": out must be a CUDA tensor, got device ", out.device());
  check_like(op, "out", out, "input", input);
  check_shape(op, "out", out, shape);
}

// out = gelu(input), same shape.
void gelu_out(const char *op, bool tanh, at::Tensor &out, const at::Tensor &input) {
  check_input(op, "input", input);
  check_out(op, out, input, input.sizes());
  if (input.numel() == 0) return;
  const RowMatrix x = as_row_matrix(op, "input", input);
  const RowMatrix y = as_row_matrix(op, "out", out);
  at::assert_no_partial_overlap(out, input);  // out == input (in place) is fine
  const c10::cuda::CUDAGuard guard(input.device());
  const Operand in[] = {{input.data_ptr(), x.row_stride}};
  const Operand res[] = {{out.data_ptr(), y.row_stride}};
  launch_rowwise(tanh ? RowwiseOp::kGeluTanh : RowwiseOp::kGelu, input.scalar_type(), x.rows, x.width, in, res);
}

// input [.., 2d] with gate = input[.., :d], up = input[.., d:]; out [.., d].
void gelu_and_mul_out(const char *op, bool tanh, at::Tensor &out, const at::Tensor &input) {
  check_input(op, "input", input);
  TORCH_CHECK_VALUE(input.dim() >= 1, op, ": input must have at least one dimension ([..., 2d]), got a 0-d tensor");
  const int64_t two_d = input.size(-1);
  TORCH_CHECK_VALUE(two_d % 2 == 0, op,
                    ": input must have an even last dimension (gate and up halves, [..., 2d]), got ", two_d);
  const int64_t d = two_d / 2;
  std::vector<int64_t> out_shape = input.sizes().vec();
  out_shape.back() = d;
  check_out(op, out, input, out_shape);
  if (out.numel() == 0) return;
  const RowMatrix x = as_row_matrix(op, "input", input);
  const RowMatrix y = as_row_matrix(op, "out", out);
  at::assert_no_overlap(out, input);
  const c10::cuda::CUDAGuard guard(input.device());
  char *gate = static_cast<char *>(input.data_ptr());
  char *up = gate + d * static_cast<int64_t>(input.element_size());
  const Operand in[] = {{gate, x.row_stride}, {up, x.row_stride}};
  const Operand res[] = {{out.data_ptr(), y.row_stride}};
  launch_rowwise(tanh ? RowwiseOp::kGegluTanh : RowwiseOp::kGeglu, input.scalar_type(), x.rows, d, in, res);
}

// gelu(gate) * up into a new contiguous tensor.
at::Tensor geglu_new(const char *op, bool tanh, const at::Tensor &gate, const at::Tensor &up) {
  check_input(op, "gate", gate);
  check_input(op, "up", up);
  check_like(op, "up", up, "gate", gate);
  check_shape(op, "up", up, gate.sizes());
  const c10::cuda::CUDAGuard guard(gate.device());
  at::Tensor out = at::empty(gate.sizes(), gate.options().memory_format(at::MemoryFormat::Contiguous));
  if (out.numel() == 0) return out;
  const RowMatrix g = as_row_matrix(op, "gate", gate);
  const RowMatrix u = as_row_matrix(op, "up", up);
  const Operand in[] = {{gate.data_ptr(), g.row_stride}, {up.data_ptr(), u.row_stride}};
  const Operand res[] = {{out.data_ptr(), g.width}};
  launch_rowwise(tanh ? RowwiseOp::kGegluTanh : RowwiseOp::kGeglu, gate.scalar_type(), g.rows, g.width, in, res);
  return out;
}

// (grad_gate, grad_up) of gelu(gate) * up, new contiguous tensors.
std::tuple<at::Tensor, at::Tensor> geglu_backward_new(const char *op, bool tanh, const at::Tensor &grad_out,
                                                      const at::Tensor &gate, const at::Tensor &up) {
  check_input(op, "grad_out", grad_out);
  check_input(op, "gate", gate);
  check_input(op, "up", up);
  check_like(op, "gate", gate, "grad_out", grad_out);
  check_like(op, "up", up, "grad_out", grad_out);
  check_shape(op, "gate", gate, grad_out.sizes());
  check_shape(op, "up", up, grad_out.sizes());
  const c10::cuda::CUDAGuard guard(gate.device());
  const auto options = gate.options().memory_format(at::MemoryFormat::Contiguous);
  at::Tensor grad_gate = at::empty(gate.sizes(), options);
  at::Tensor grad_up = at::empty(gate.sizes(), options);
  if (gate.numel() == 0) return {grad_gate, grad_up};
  const RowMatrix go = as_row_matrix(op, "grad_out", grad_out);
  const RowMatrix g = as_row_matrix(op, "gate", gate);
  const RowMatrix u = as_row_matrix(op, "up", up);
  const Operand in[] = {{grad_out.data_ptr(), go.row_stride}, {gate.data_ptr(), g.row_stride},
                        {up.data_ptr(), u.row_stride}};
  const Operand res[] = {{grad_gate.data_ptr(), g.width}, {grad_up.data_ptr(), g.width}};
  launch_rowwise(tanh ? RowwiseOp::kGegluBackwardTanh : RowwiseOp::kGegluBackward, gate.scalar_type(), g.rows,
                 g.width, in, res);
  return {grad_gate, grad_up};
}

}  // namespace
}  // namespace geglu_cuda

void gelu_and_mul(torch::Tensor &out, torch::Tensor const &input) {
  geglu_cuda::gelu_and_mul_out("gelu_and_mul", false, out, input);
}

void gelu_tanh_and_mul(torch::Tensor &out, torch::Tensor const &input) {
  geglu_cuda::gelu_and_mul_out("gelu_tanh_and_mul", true, out, input);
}

void gelu(torch::Tensor &out, torch::Tensor const &input) { geglu_cuda::gelu_out("gelu", false, out, input); }

void gelu_tanh(torch::Tensor &out, torch::Tensor const &input) {
  geglu_cuda::gelu_out("gelu_tanh", true, out, input);
}

torch::Tensor geglu(torch::Tensor const &gate, torch::Tensor const &up, std::string_view approximate) {
  return geglu_cuda::geglu_new("geglu", geglu_cuda::is_tanh("geglu", approximate), gate, up);
}

std::tuple<torch::Tensor, torch::Tensor> geglu_backward(torch::Tensor const &grad_out, torch::Tensor const &gate,
                                                        torch::Tensor const &up, std::string_view approximate) {
  return geglu_cuda::geglu_backward_new("geglu_backward", geglu_cuda::is_tanh("geglu_backward", approximate),
                                        grad_out, gate, up);
}
