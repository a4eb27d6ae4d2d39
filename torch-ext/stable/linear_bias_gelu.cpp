// _linear_bias_gelu on torch's stable ABI: gelu(x @ weight.T + bias), the argument
// checks (gemm_checks.h) and aten::linear + aten::gelu in one native call.
//
// Registered as CompositeImplicitAutograd: it runs ATen ops through the dispatcher,
// so autograd differentiates them and torch.compile traces them (no fake needed).
// The version-tied CUDA build (torch-ext/linear_bias_gelu.cpp) also takes cuBLASLt's
// GELU_BIAS epilogue for tanh + bias without gradients; that needs requires_grad and
// a Scalar-taking op, neither of which the stable ABI of torch 2.10 reaches, and the
// CPU build never took it (the CPU _addmm_activation applies the exact GELU).

#include <string>

#include "stable/aten.h"
#include "stable/binding.h"
#include "stable/gemm_checks.h"

namespace geglu_stable {

Tensor linear_bias_gelu(const Tensor &x, const Tensor &weight, const OptTensor &bias, std::string_view approximate) {
  gemm_checks::check_x(x);
  gemm_checks::check_linear_operand("weight", weight, x, x.size(-1));
  const int64_t n[1] = {weight.size(0)};
  gemm_checks::check_optional("bias", bias, x, IntArrayRef(n, 1));
  gemm_checks::is_tanh(approximate);
  return aten::gelu(aten::linear(x, weight, bias), std::string(approximate));
}

}  // namespace geglu_stable
