// The CUDA activation ops of common/activation_ops.h, on torch's stable ABI:
// argument checks, the [rows, width] view of each tensor (never a hidden copy), then
// one launch of the elementwise kernel (geglu_cuda.cu) on the current stream of the
// tensors' device.
//
// Bad input raises ValueError whose message names the op, the argument and what was
// expected, like the package's Python checks (_checks.py); the checks and the
// [rows, width] rule are common/tensor_checks.h, shared with the CPU backend.

// shim.h declares its CUDA entries (aoti_torch_get_current_cuda_stream) only under
// USE_CUDA; it must be set before the first include that reaches shim.h.
#ifndef USE_CUDA
#define USE_CUDA
#endif
#include <torch/csrc/inductor/aoti_torch/c/shim.h>

#include <string_view>
#include <tuple>
#include <vector>

#include "common/activation_ops.h"
#include "common/device_tensors.h"
#include "common/tensor_checks.h"
#include "cuda_context.h"
#include "activation/rowwise.h"

namespace geglu_cuda {

cudaStream_t current_stream(const torch::stable::Tensor &t) {
  void *stream = nullptr;
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_current_cuda_stream(t.get_device_index(), &stream));
  return static_cast<cudaStream_t>(stream);
}

namespace {

using geglu_stable::check_input;
using geglu_stable::check_matches;
using geglu_stable::RowMatrix;
using geglu_stable::ScalarType;
using geglu_stable::Tensor;

constexpr geglu_stable::DeviceType kCuda = geglu_stable::DeviceType::CUDA;

// Here every tensor, read or written, must have rows that do not overlap.
RowMatrix as_row_matrix(std::string_view op, std::string_view name, const Tensor &t) {
  return geglu_stable::as_row_matrix(op, name, t, geglu_stable::RowOverlap::kRefused);
}

RowwiseDtype rowwise_dtype(const Tensor &t) {
  switch (t.scalar_type()) {
    case ScalarType::Float:
      return RowwiseDtype::kFloat32;
    case ScalarType::Half:
      return RowwiseDtype::kFloat16;
    case ScalarType::BFloat16:
      return RowwiseDtype::kBFloat16;
    default:
      throw std::logic_error("rowwise_dtype of an unchecked tensor");
  }
}

// One launch on t's device and its current stream.
void launch(RowwiseOp op, const Tensor &t, int64_t rows, int64_t width, const Operand *in, const Operand *out) {
  const geglu_stable::device::DeviceGuard guard(t.get_device_index());
  launch_rowwise(op, rowwise_dtype(t), rows, width, in, out, t.get_device_index(), current_stream(t));
}

// out = gelu(input), same shape.
void gelu_out(std::string_view op, bool tanh, Tensor &out, const Tensor &input) {
  check_input(op, "input", input, kCuda);
  check_matches(op, "out", out, "input", input, input.sizes(), kCuda);
  if (input.numel() == 0) return;
  const RowMatrix x = as_row_matrix(op, "input", input);
  const RowMatrix y = as_row_matrix(op, "out", out);
  geglu_stable::check_no_partial_overlap(op, out, input);
  const Operand in[] = {{input.data_ptr(), x.row_stride}};
  const Operand res[] = {{out.data_ptr(), y.row_stride}};
  launch(tanh ? RowwiseOp::kGeluTanh : RowwiseOp::kGelu, input, x.rows, x.width, in, res);
}

// input [.., 2d] with gate = input[.., :d], up = input[.., d:]; out [.., d].
void gelu_and_mul_out(std::string_view op, bool tanh, Tensor &out, const Tensor &input) {
  geglu_stable::check_not_swapped(op, out, input);
  check_input(op, "input", input, kCuda);
  const int64_t d = geglu_stable::merged_half_width(op, "input", input);
  const auto in_shape = input.sizes();
  std::vector<int64_t> out_shape(in_shape.begin(), in_shape.end());
  out_shape.back() = d;
  check_matches(op, "out", out, "input", input, out_shape, kCuda);
  if (out.numel() == 0) return;
  const RowMatrix x = as_row_matrix(op, "input", input);
  const RowMatrix y = as_row_matrix(op, "out", out);
  char *gate = static_cast<char *>(input.data_ptr());
  char *up = gate + d * static_cast<int64_t>(input.element_size());
  // out may be exactly the gate or the up half (in place: one thread reads an element
  // of both halves, then writes it); any other shared byte is refused.
  const bool is_half = (out.data_ptr() == gate || out.data_ptr() == up) && (x.rows == 1 || y.row_stride == x.row_stride);
  GEGLU_CHECK_VALUE(is_half || !geglu_stable::partially_overlaps(out, input), op,
                    ": `out` partially overlaps `input` in memory; pass a separate tensor");
  const Operand in[] = {{gate, x.row_stride}, {up, x.row_stride}};
  const Operand res[] = {{out.data_ptr(), y.row_stride}};
  launch(tanh ? RowwiseOp::kGegluTanh : RowwiseOp::kGeglu, input, x.rows, d, in, res);
}

// gelu(gate) * up into a new contiguous tensor.
Tensor geglu_new(std::string_view op, bool tanh, const Tensor &gate, const Tensor &up) {
  check_input(op, "gate", gate, kCuda);
  check_matches(op, "up", up, "gate", gate, gate.sizes(), kCuda);
  const RowMatrix g = as_row_matrix(op, "gate", gate);
  const RowMatrix u = as_row_matrix(op, "up", up);
  Tensor out = geglu_stable::device::empty(gate.sizes(), gate);
  if (out.numel() == 0) return out;
  const Operand in[] = {{gate.data_ptr(), g.row_stride}, {up.data_ptr(), u.row_stride}};
  const Operand res[] = {{out.data_ptr(), g.width}};
  launch(tanh ? RowwiseOp::kGegluTanh : RowwiseOp::kGeglu, gate, g.rows, g.width, in, res);
  return out;
}

// (grad_gate, grad_up) of gelu(gate) * up, new contiguous tensors.
std::tuple<Tensor, Tensor> geglu_backward_new(std::string_view op, bool tanh, const Tensor &grad_out,
                                              const Tensor &gate, const Tensor &up) {
  check_input(op, "gate", gate, kCuda);
  check_matches(op, "up", up, "gate", gate, gate.sizes(), kCuda);
  check_matches(op, "grad_out", grad_out, "gate", gate, gate.sizes(), kCuda);
  const RowMatrix go = as_row_matrix(op, "grad_out", grad_out);
  const RowMatrix g = as_row_matrix(op, "gate", gate);
  const RowMatrix u = as_row_matrix(op, "up", up);
  Tensor grad_gate = geglu_stable::device::empty(gate.sizes(), gate);
  Tensor grad_up = geglu_stable::device::empty(gate.sizes(), gate);
  if (gate.numel() == 0) return {grad_gate, grad_up};
  const Operand in[] = {{grad_out.data_ptr(), go.row_stride}, {gate.data_ptr(), g.row_stride},
                        {up.data_ptr(), u.row_stride}};
  const Operand res[] = {{grad_gate.data_ptr(), g.width}, {grad_up.data_ptr(), g.width}};
  launch(tanh ? RowwiseOp::kGegluBackwardTanh : RowwiseOp::kGegluBackward, gate, g.rows, g.width, in, res);
  return {grad_gate, grad_up};
}

}  // namespace
}  // namespace geglu_cuda

// ---------------------------------------------------------------- common/activation_ops.h

namespace geglu_stable {

void gelu_and_mul(Tensor &out, const Tensor &input) {
  geglu_cuda::gelu_and_mul_out("gelu_and_mul", false, out, input);
}

void gelu_tanh_and_mul(Tensor &out, const Tensor &input) {
  geglu_cuda::gelu_and_mul_out("gelu_tanh_and_mul", true, out, input);
}

void gelu(Tensor &out, const Tensor &input) { geglu_cuda::gelu_out("gelu", false, out, input); }

void gelu_tanh(Tensor &out, const Tensor &input) { geglu_cuda::gelu_out("gelu_tanh", true, out, input); }

Tensor geglu(const Tensor &gate, const Tensor &up, std::string_view approximate) {
  return geglu_cuda::geglu_new("geglu", is_tanh("geglu", approximate), gate, up);
}

std::tuple<Tensor, Tensor> geglu_backward(const Tensor &grad_out, const Tensor &gate, const Tensor &up,
                                          std::string_view approximate) {
  return geglu_cuda::geglu_backward_new("geglu_backward", is_tanh("geglu_backward", approximate), grad_out, gate,
                                        up);
}

}  // namespace geglu_stable
