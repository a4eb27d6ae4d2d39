// The fused inference GEMMs of common/fused_gemms.h on CPU: none. ATen's GEMMs
// (oneDNN / MKL) with the geglu kernel between them serve every CPU call, and a fused
// CPU GEMM would have to beat them first.

#include "common/fused_gemms.h"

namespace geglu_stable {

OptTensor fused_gate_up(const Tensor &, const Tensor &, const Tensor &, const OptTensor &, const OptTensor &, bool) {
  return std::nullopt;
}

OptTensor fused_down(const Tensor &, const Tensor &, const OptTensor &, const OptTensor &) { return std::nullopt; }

OptTensor fused_small_batch_mlp(const Tensor &, const Tensor &, const Tensor &, const OptTensor &, const OptTensor &,
                                const Tensor &, const OptTensor &, const OptTensor &, bool,
                                torch::headeronly::IntHeaderOnlyArrayRef) {
  return std::nullopt;
}

}  // namespace geglu_stable
