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

// The GeGLU MLP from torch GEMMs + geglu/geglu_backward, differentiable in C++
// (torch-ext/geglu_mlp.cpp): backend kernel and Autograd kernel of one op.
torch::Tensor geglu_mlp_cublas(torch::Tensor const &x, torch::Tensor const &w_gate,
                               c10::optional<torch::Tensor> const &w_up, torch::Tensor const &w_down,
                               c10::optional<torch::Tensor> const &b_gate, c10::optional<torch::Tensor> const &b_up,
                               c10::optional<torch::Tensor> const &b_down,
                               c10::optional<torch::Tensor> const &residual, std::string_view approximate);
torch::Tensor geglu_mlp_cublas_autograd(torch::Tensor const &x, torch::Tensor const &w_gate,
                                        c10::optional<torch::Tensor> const &w_up, torch::Tensor const &w_down,
                                        c10::optional<torch::Tensor> const &b_gate,
                                        c10::optional<torch::Tensor> const &b_up,
                                        c10::optional<torch::Tensor> const &b_down,
                                        c10::optional<torch::Tensor> const &residual, std::string_view approximate);

// CUDA only: the Hopper GEMM engine with the GeGLU in its epilogue
// (geglu_kernels/cuda/geglu_linear_sm90.cpp); x [M, K], weights [hidden, K].
torch::Tensor geglu_linear_sm90(torch::Tensor const &x, torch::Tensor const &w_gate, torch::Tensor const &w_up,
                                c10::optional<torch::Tensor> const &b_gate, c10::optional<torch::Tensor> const &b_up,
                                std::string_view approximate);
