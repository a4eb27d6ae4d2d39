// The fused inference GEMMs of _geglu_mlp and _linear_bias_gelu (torch_binding.h) on
// CPU: none. ATen's GEMMs (oneDNN / MKL) with the package's activation kernels serve
// every CPU call, and a fused CPU GEMM would have to beat them first.

#include "torch_binding.h"

torch::Tensor fused_gate_up(torch::Tensor const &, torch::Tensor const &, torch::Tensor const &,
                            c10::optional<torch::Tensor> const &, c10::optional<torch::Tensor> const &, bool) {
  return {};
}

torch::Tensor fused_linear_gelu(torch::Tensor const &, torch::Tensor const &, c10::optional<torch::Tensor> const &,
                                bool) {
  return {};
}
