// _linear_bias_gelu on torch's stable ABI: gelu(x @ weight.T + bias), the op the
// bias+GELU layer (BiasGeluIntermediate) runs for inference: the argument checks and
// the route in one native call. A call that needs gradients takes linear.py's
// composition (F.linear, then F.gelu), which autograd differentiates.
//
// Routes, for real tensors of this build's device (fake ones use the fake in linear.py):
// - CUDA: the backend's bias + GELU GEMM where it has a faster one than cuBLAS
//   (fused_linear_gelu: the Hopper engine, both GELU forms, at the shapes
//   geglu_kernels/cuda/fused_gemm_router.cpp lists);
// - CUDA, tanh GELU with a bias: cuBLASLt's GELU_BIAS epilogue (_addmm_activation: one
//   kernel; the CPU _addmm_activation applies the exact GELU, so CPU never takes it);
// - otherwise torch's GEMM with the bias in it, then this package's gelu kernel in place.

#include <string>
#include <vector>

#include "ops/aten.h"
#include "ops/gemm_checks.h"
#include "ops/layer_ops.h"

namespace geglu_stable {

Tensor linear_bias_gelu(const Tensor &x, const Tensor &weight, const OptTensor &bias, std::string_view approximate) {
  gemm_checks::check_x(x);
  gemm_checks::check_linear_operand("weight", weight, x, x.size(-1));
  const int64_t n = weight.size(0), k = x.size(-1);
  const int64_t ns[1] = {n};
  gemm_checks::check_optional("bias", bias, x, IntArrayRef(ns, 1));
  const bool tanh = gemm_checks::is_tanh(approximate);
  const device::DeviceGuard guard(x.get_device_index());
  const IntArrayRef xs = x.sizes();
  std::vector<int64_t> out_shape(xs.begin(), xs.end());
  out_shape.back() = n;
  const int64_t x2_shape[2] = {-1, k};
  OptTensor x2 = x.dim() == 2 ? OptTensor(x) : device::rows_view(x);
  if (!x2.has_value()) x2 = aten::reshape(x, IntArrayRef(x2_shape, 2));
  // y is a new contiguous [M, N] tensor.
  auto restore = [&](const Tensor &y) { return x.dim() == 2 ? y : device::contiguous_view(y, out_shape); };
#if defined(CUDA_KERNEL)
  // K == 0: _addmm_activation skips its GELU, and no kernel has anything to compute.
  if (x.numel() > 0 && k > 0) {
    if (OptTensor y = fused_linear_gelu(*x2, weight, bias, tanh)) return restore(*y);
    if (tanh && bias.has_value()) return restore(device::addmm_gelu(*bias, *x2, weight));
  }
#endif
  Tensor y = device::linear(*x2, weight, bias);
  if (tanh) {
    gelu_tanh(y, y);
  } else {
    gelu(y, y);
  }
  return restore(y);
}

}  // namespace geglu_stable
