#pragma once
// The ops of the native module (torch's stable ABI, torch/csrc/stable): one declaration
// per op, written over torch::stable::Tensor. Each backend (geglu_kernels/cpu,
// geglu_kernels/cuda) implements the activation ops and the fused GEMM hooks below;
// torch-ext/ implements the per-layer ops over them, and torch_binding.cpp registers
// them with boxed kernels. A build links exactly one backend.

#include <optional>
#include <string_view>
#include <tuple>

#include <torch/csrc/stable/tensor.h>

namespace geglu_stable {

using Tensor = torch::stable::Tensor;
using OptTensor = std::optional<Tensor>;

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

// _geglu_mlp (torch-ext/geglu_mlp.cpp), inference: x [..., K]; w_up absent:
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

// _geglu_linear (torch-ext/geglu_mlp.cpp): gelu(x @ w_gate.T + b_gate) * (x @ w_up.T +
// b_up) as [..., hidden], inference, by _geglu_mlp's gate/up route (w_up absent: merged).
Tensor geglu_linear(const Tensor &x, const Tensor &w_gate, const OptTensor &w_up, const OptTensor &b_gate,
                    const OptTensor &b_up, std::string_view approximate);

// _linear_bias_gelu (torch-ext/linear_bias_gelu.cpp): gelu(x @ weight.T + bias),
// inference (linear.py takes the differentiable composition when a gradient is needed).
Tensor linear_bias_gelu(const Tensor &x, const Tensor &weight, const OptTensor &bias, std::string_view approximate);

// Whether this backend has a fused gate/up kernel at all (fused_gate_up below): the CPU
// backend has none, and _geglu_mlp skips preparing its operands.
#if defined(CPU_KERNEL)
inline constexpr bool kHasFusedGateUp = false;
#else
inline constexpr bool kHasFusedGateUp = true;
#endif

// The inference gate/up GEMM _geglu_mlp asks the backend to fuse: gelu(x @ w_gate.T +
// b_gate) * (x @ w_up.T + b_up) as a new [M, hidden] tensor, or std::nullopt where the
// backend has no kernel for the call. x is [M, K] with M, K > 0, checked by the caller.
OptTensor fused_gate_up(const Tensor &x, const Tensor &w_gate, const Tensor &w_up, const OptTensor &b_gate,
                        const OptTensor &b_up, bool tanh);

// The down GEMM _geglu_mlp (and _geglu_mlp_train's forward) asks the backend for: h @
// w_down.T + b_down + residual as a new [M, N] tensor, or std::nullopt where the backend
// has no kernel for the call that beats torch's GEMM. h is the gate/up's [M, hidden]
// output (M, hidden > 0), the residual an [M, N] view, all checked by the caller.
OptTensor fused_down(const Tensor &h, const Tensor &w_down, const OptTensor &b_down, const OptTensor &residual);

// The whole inference MLP where the backend runs both GEMMs itself (CUDA: sm_90 at
// decode): y = gelu(x @ w_gate.T + b_gate) * (x @ w_up.T + b_up) @ w_down.T + b_down +
// residual as a new contiguous tensor of out_shape ([..., N], M rows), with h in the same
// allocation (one call to the allocator instead of two; h is no tensor of its own), or
// std::nullopt. Operands as fused_gate_up's and fused_down's, checked by the caller.
OptTensor fused_decode_mlp(const Tensor &x, const Tensor &w_gate, const Tensor &w_up, const OptTensor &b_gate,
                           const OptTensor &b_up, const Tensor &w_down, const OptTensor &b_down,
                           const OptTensor &residual, bool tanh, torch::headeronly::IntHeaderOnlyArrayRef out_shape);

#if defined(CUDA_KERNEL)
// The inference bias + GELU GEMM _linear_bias_gelu asks the CUDA backend for:
// gelu(x @ weight.T + bias) as a new [M, N] tensor, or std::nullopt where it has no
// faster kernel than cuBLAS for the call. x is [M, K] with M, K > 0, weight [N, K].
OptTensor fused_linear_gelu(const Tensor &x, const Tensor &weight, const OptTensor &bias, bool tanh);
#endif

}  // namespace geglu_stable
