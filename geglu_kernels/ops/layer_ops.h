#pragma once
// The per-layer ops of the native module (torch's stable ABI, torch/csrc/stable): one
// declaration per op, written over torch::stable::Tensor, implemented here in ops/
// (geglu_mlp.cpp, linear_bias_gelu.cpp, geglu_mlp_fp8.cpp) over what each backend
// (geglu_kernels/cpu, geglu_kernels/cuda) implements: the activation ops
// (common/activation_ops.h) and the fused GEMM hooks (common/fused_gemms.h).
// torch-ext/torch_binding.cpp registers them with boxed kernels. A build links exactly
// one backend.

#include <optional>
#include <string_view>
#include <tuple>

#include <torch/csrc/stable/tensor.h>

#include "common/activation_ops.h"
#include "common/fused_gemms.h"

namespace geglu_stable {

using Tensor = torch::stable::Tensor;
using OptTensor = std::optional<Tensor>;

// _geglu_mlp (ops/geglu_mlp.cpp), inference: x [..., K]; w_up absent:
// w_gate is a merged [2*hidden, K] weight.
Tensor geglu_mlp(const Tensor &x, const Tensor &w_gate, const OptTensor &w_up, const Tensor &w_down,
                 const OptTensor &b_gate, const OptTensor &b_up, const OptTensor &b_down, const OptTensor &residual,
                 std::string_view approximate);

// _geglu_mlp_train: the same y, with what backward needs: (y [..., N], the
// pre-activations [gate | up] as [M, 2*hidden], h = gelu(gate) * up as [M, hidden]).
// Its autograd node is the Python Function `_GegluMlpTrain` (torch-ext/geglu/linear.py).
std::tuple<Tensor, Tensor, Tensor> geglu_mlp_train(const Tensor &x, const Tensor &w_gate, const OptTensor &w_up,
                                                   const Tensor &w_down, const OptTensor &b_gate,
                                                   const OptTensor &b_up, const OptTensor &b_down,
                                                   const OptTensor &residual, std::string_view approximate);

// _geglu_mlp_backward: the gradients _geglu_mlp_train's backward needs (bit i of
// `needs`: input i of x, w_gate, w_up, w_down, b_gate, b_up, b_down), in that order.
std::tuple<OptTensor, OptTensor, OptTensor, OptTensor, OptTensor, OptTensor, OptTensor> geglu_mlp_backward(
    const Tensor &grad, const Tensor &x, const Tensor &w_gate, const OptTensor &w_up, const Tensor &w_down,
    const OptTensor &b_gate, const Tensor &pre, const Tensor &h, int64_t needs, std::string_view approximate);

// _geglu_linear (ops/geglu_mlp.cpp): gelu(x @ w_gate.T + b_gate) * (x @ w_up.T +
// b_up) as [..., hidden], inference, by _geglu_mlp's gate/up route (w_up absent: merged).
Tensor geglu_linear(const Tensor &x, const Tensor &w_gate, const OptTensor &w_up, const OptTensor &b_gate,
                    const OptTensor &b_up, std::string_view approximate);

// _linear_bias_gelu (ops/linear_bias_gelu.cpp): gelu(x @ weight.T + bias),
// inference (linear.py takes the differentiable composition when a gradient is needed).
Tensor linear_bias_gelu(const Tensor &x, const Tensor &weight, const OptTensor &bias, std::string_view approximate);

#if defined(CUDA_KERNEL)
// _geglu_mlp_fp8 (ops/geglu_mlp_fp8.cpp): the block-scaled FP8 GeGLU MLP, inference;
// _geglu_mlp_fp8_serves: whether this build has its kernels for x's device.
Tensor geglu_mlp_fp8(const Tensor &x, const Tensor &w_gate, const Tensor &w_gate_scale, const Tensor &w_up,
                     const Tensor &w_up_scale, const Tensor &w_down, const Tensor &w_down_scale,
                     const OptTensor &residual, std::string_view approximate);
bool geglu_mlp_fp8_serves(const Tensor &x);
// _fp8_linear (ops/geglu_mlp_fp8.cpp): q(x) @ deq(weight).T + residual, inference.
Tensor fp8_linear(const Tensor &x, const Tensor &weight, const Tensor &weight_scale, const OptTensor &residual);
#endif

}  // namespace geglu_stable
