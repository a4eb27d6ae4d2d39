#pragma once

#include <string_view>
#include <tuple>

#include <torch/torch.h>

// One declaration per op; each backend (geglu_kernels/cpu, geglu_kernels/cuda)
// implements all of them, and a build links exactly one backend.

// Merged input [..., 2d] -> out [..., d]: gate = x[..., :d], up = x[..., d:]
// (the kernels-community/activation contract).
void gelu_and_mul(torch::Tensor &out, torch::Tensor const &input);
void gelu_tanh_and_mul(torch::Tensor &out, torch::Tensor const &input);

// Plain activations, out has the shape of input.
void gelu(torch::Tensor &out, torch::Tensor const &input);
void gelu_tanh(torch::Tensor &out, torch::Tensor const &input);

// gelu(gate) * up over two tensors of one shape; approximate is "tanh" or "none".
torch::Tensor geglu(torch::Tensor const &gate, torch::Tensor const &up,
                    std::string_view approximate);

// Exact derivatives of geglu, computed in float32: (grad_gate, grad_up).
std::tuple<torch::Tensor, torch::Tensor>
geglu_backward(torch::Tensor const &grad_out, torch::Tensor const &gate,
               torch::Tensor const &up, std::string_view approximate);

// _geglu_mlp, the per-layer native op (torch-ext/geglu_mlp.cpp): backend kernel and
// Autograd kernel. x [..., K]; w_up absent: w_gate is a merged [2*hidden, K] weight.
torch::Tensor geglu_mlp(torch::Tensor const &x, torch::Tensor const &w_gate, c10::optional<torch::Tensor> const &w_up,
                        torch::Tensor const &w_down, c10::optional<torch::Tensor> const &b_gate,
                        c10::optional<torch::Tensor> const &b_up, c10::optional<torch::Tensor> const &b_down,
                        c10::optional<torch::Tensor> const &residual, std::string_view approximate);
torch::Tensor geglu_mlp_autograd(torch::Tensor const &x, torch::Tensor const &w_gate,
                                 c10::optional<torch::Tensor> const &w_up, torch::Tensor const &w_down,
                                 c10::optional<torch::Tensor> const &b_gate, c10::optional<torch::Tensor> const &b_up,
                                 c10::optional<torch::Tensor> const &b_down,
                                 c10::optional<torch::Tensor> const &residual, std::string_view approximate);

// _linear_bias_gelu (torch-ext/linear_bias_gelu.cpp): gelu(x @ weight.T + bias), one
// native call (CompositeImplicitAutograd: differentiable through the ATen ops it runs).
torch::Tensor linear_bias_gelu(torch::Tensor const &x, torch::Tensor const &weight,
                               c10::optional<torch::Tensor> const &bias, std::string_view approximate);

// The inference gate/up GEMM _geglu_mlp asks the backend to fuse:
// gelu(x @ w_gate.T + b_gate) * (x @ w_up.T + b_up) as a new [M, hidden] tensor, or an
// undefined one where the backend has no kernel for this call (the op then runs torch's
// GEMM and the geglu kernel). Arguments are checked by the caller; x is [M, K] with
// M, K > 0; w_gate and w_up [hidden, K] (they may be two halves of one tensor).
torch::Tensor fused_gate_up(torch::Tensor const &x, torch::Tensor const &w_gate, torch::Tensor const &w_up,
                            c10::optional<torch::Tensor> const &b_gate, c10::optional<torch::Tensor> const &b_up,
                            bool tanh);

// The inference bias + GELU GEMM _linear_bias_gelu asks the backend for:
// gelu(x @ weight.T + bias) as a new [M, N] tensor, or an undefined one where the
// backend has no faster kernel for this call (the op then runs cuBLAS). Arguments are
// checked by the caller; x is [M, K] with M, K > 0, weight [N, K], bias [N] or absent.
torch::Tensor fused_linear_gelu(torch::Tensor const &x, torch::Tensor const &weight,
                                c10::optional<torch::Tensor> const &bias, bool tanh);

// CUDA only: the Hopper GEMM engine with the GeGLU in its epilogue
// (geglu_kernels/cuda/geglu_linear_sm90.cpp); x [M, K], weights [hidden, K].
torch::Tensor geglu_linear_sm90(torch::Tensor const &x, torch::Tensor const &w_gate, torch::Tensor const &w_up,
                                c10::optional<torch::Tensor> const &b_gate, c10::optional<torch::Tensor> const &b_up,
                                std::string_view approximate);

