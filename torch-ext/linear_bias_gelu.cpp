// _linear_bias_gelu: gelu(x @ weight.T + bias), the op the bias+GELU layer
// (BiasGeluIntermediate) forward runs: the argument checks and the route in one
// native call.
//
// CompositeImplicitAutograd: it runs ATen ops, so autograd differentiates them and
// torch.compile traces them (no fake implementation needed). No gradient needed, on
// CUDA:
// - the backend's bias + GELU GEMM where it has a faster one (fused_linear_gelu: the
//   Hopper engine, both GELU forms, at the shapes geglu_kernels/cuda/mlp_kernels.cpp
//   lists); not for fake tensors (compile tracing), which take the ATen routes below;
// - tanh GELU with a bias: cuBLASLt's GELU_BIAS epilogue (at::_addmm_activation: one
//   kernel; it has no derivative, and on CPU it applies the exact GELU, so neither
//   takes it).
// Otherwise at::linear (bias in the GEMM epilogue), then at::gelu.

#include <torch/torch.h>

#include "gemm_checks.h"
#include "torch_binding.h"

torch::Tensor linear_bias_gelu(torch::Tensor const &x, torch::Tensor const &weight,
                               c10::optional<torch::Tensor> const &bias, std::string_view approximate) {
  gemm_checks::check_x(x);
  gemm_checks::check_linear_operand("weight", weight, x, x.size(-1));
  gemm_checks::check_optional("bias", bias, x, {weight.size(0)});
  const bool tanh = gemm_checks::is_tanh(approximate);
  const bool needs_grad = at::GradMode::is_enabled() && (x.requires_grad() || weight.requires_grad() ||
                                                         (bias.has_value() && bias->requires_grad()));
  // K == 0: _addmm_activation skips its GELU, and no kernel has anything to compute.
  if (x.is_cuda() && x.size(-1) > 0 && x.numel() > 0 && !needs_grad) {
    std::vector<int64_t> out_shape = x.sizes().vec();
    out_shape.back() = weight.size(0);
    const at::Tensor x2 = x.dim() == 2 ? x : x.reshape({-1, x.size(-1)});
    // Real tensors only: fake ones (compile tracing) have no data for a kernel.
    if (!x.key_set().has_any(c10::DispatchKeySet({c10::DispatchKey::Python, c10::DispatchKey::Functionalize}))) {
      at::Tensor y = fused_linear_gelu(x2, weight, bias, tanh);
      if (y.defined()) return y.view(out_shape);
    }
    if (tanh && bias.has_value()) {
      return at::_addmm_activation(*bias, x2, weight.t(), 1, 1, /*use_gelu=*/true).view(out_shape);
    }
  }
  return at::gelu(at::linear(x, weight, bias), approximate);
}
