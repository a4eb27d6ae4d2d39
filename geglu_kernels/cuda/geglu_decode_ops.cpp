// The internal ops _geglu_decode_gate_up and _geglu_decode_linear: the decode kernels
// (geglu_decode.cu, C++ interface geglu_decode.h) behind torch's dispatcher, for tests
// and benchmarks. Inference only (no autograd). The per-layer native op calls
// geglu_decode:: directly.

#include "common/tensor_checks.h"
#include "geglu_decode.h"
#include "torch_binding.h"

torch::Tensor geglu_decode_gate_up(torch::Tensor const &x, torch::Tensor const &w_gate, torch::Tensor const &w_up,
                                   c10::optional<torch::Tensor> const &b_gate,
                                   c10::optional<torch::Tensor> const &b_up, std::string_view approximate) {
  const bool tanh = geglu_checks::is_tanh("_geglu_decode_gate_up", approximate);
  return geglu_decode::gate_up(x, w_gate, w_up, b_gate, b_up, tanh);
}

torch::Tensor geglu_decode_linear(torch::Tensor const &h, torch::Tensor const &w,
                                  c10::optional<torch::Tensor> const &bias,
                                  c10::optional<torch::Tensor> const &residual) {
  return geglu_decode::linear(h, w, bias, residual);
}
