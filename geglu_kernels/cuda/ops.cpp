// The CUDA ops of torch_binding.h: argument checks, the [rows, width] view of each
// tensor (never a hidden copy), then one launch of the elementwise kernel
// (geglu_cuda.cu) on the current stream of the tensors' device.
//
// Bad input raises ValueError (TORCH_CHECK_VALUE) whose message names the op, the
// argument and what was expected, like the package's Python checks (_checks.py); the
// checks and the [rows, width] rule are common/tensor_checks.h, shared with the CPU
// backend.

#include <string_view>
#include <tuple>
#include <vector>

#include <ATen/MemoryOverlap.h>
#include <c10/cuda/CUDAGuard.h>

#include "common/tensor_checks.h"
#include "rowwise.h"
#include "torch_binding.h"

namespace geglu_cuda {
namespace {

using geglu_checks::check_input;
using geglu_checks::check_matches;
using geglu_checks::is_tanh;
using geglu_checks::RowMatrix;

constexpr c10::DeviceType kCuda = c10::DeviceType::CUDA;

// Here every tensor, read or written, must have rows that do not overlap.
RowMatrix as_row_matrix(const char *op, const char *name, const at::Tensor &t) {
  return geglu_checks::as_row_matrix(op, name, t, geglu_checks::RowOverlap::kRefused);
}

// out = gelu(input), same shape.
void gelu_out(const char *op, bool tanh, at::Tensor &out, const at::Tensor &input) {
  check_input(op, "input", input, kCuda);
  check_matches(op, "out", out, "input", input, input.sizes(), kCuda);
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
  check_input(op, "input", input, kCuda);
  const int64_t d = geglu_checks::merged_half_width(op, "input", input);
  std::vector<int64_t> out_shape = input.sizes().vec();
  out_shape.back() = d;
  check_matches(op, "out", out, "input", input, out_shape, kCuda);
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
  check_input(op, "gate", gate, kCuda);
  check_matches(op, "up", up, "gate", gate, gate.sizes(), kCuda);
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
  check_input(op, "gate", gate, kCuda);
  check_matches(op, "up", up, "gate", gate, gate.sizes(), kCuda);
  check_matches(op, "grad_out", grad_out, "gate", gate, gate.sizes(), kCuda);
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
