// The fused gate/up GEMMs of _geglu_mlp / _geglu_mlp_train (torch_binding.h) on CPU: none. ATen's
// GEMMs (oneDNN / MKL) with the geglu kernel between them serve every CPU call, and a
// fused CPU GEMM would have to beat them first.

#include "torch_binding.h"

namespace geglu_stable {

OptTensor fused_gate_up(const Tensor &, const Tensor &, const Tensor &, const OptTensor &, const OptTensor &, bool) {
  return std::nullopt;
}

std::optional<std::tuple<Tensor, Tensor>> fused_gate_up_train(const Tensor &, const Tensor &, const Tensor &,
                                                              const OptTensor &, const OptTensor &, bool) {
  return std::nullopt;
}

}  // namespace geglu_stable
