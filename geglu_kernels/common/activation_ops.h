#pragma once
// The activation ops each backend implements (geglu_kernels/cpu/geglu_cpu.cpp,
// geglu_kernels/cuda/activation/ops.cpp), over torch's stable ABI: the binding
// (torch-ext/torch_binding.cpp) registers them, and the per-layer ops (torch-ext/) run
// them between their GEMMs. A build links exactly one backend.

#include <string_view>
#include <tuple>

#include <torch/csrc/stable/tensor.h>

namespace geglu_stable {

using Tensor = torch::stable::Tensor;

// Merged input [..., 2d] -> out [..., d]: gate = x[..., :d], up = x[..., d:]
// (the kernels-community/activation contract).
void gelu_and_mul(Tensor &out, const Tensor &input);
void gelu_tanh_and_mul(Tensor &out, const Tensor &input);

// Plain activations, out has the shape of input.
void gelu(Tensor &out, const Tensor &input);
void gelu_tanh(Tensor &out, const Tensor &input);

// gelu(gate) * up over two tensors of one shape; approximate is "tanh" or "none".
Tensor geglu(const Tensor &gate, const Tensor &up, std::string_view approximate);

// Exact derivatives of geglu, computed in float32: (grad_gate, grad_up).
std::tuple<Tensor, Tensor> geglu_backward(const Tensor &grad_out, const Tensor &gate, const Tensor &up,
                                          std::string_view approximate);

}  // namespace geglu_stable
