#pragma once
// The fused inference GEMMs the per-layer ops (geglu_kernels/ops/geglu_mlp.cpp,
// geglu_kernels/ops/linear_bias_gelu.cpp) ask the backend for, each returning std::nullopt where
// the backend has no kernel for the call (the op then runs torch's GEMMs). The CUDA
// backend chooses its kernels in geglu_kernels/cuda/fused_gemm_router.cpp; the CPU
// backend has none (geglu_kernels/cpu/fused_gemm_stubs.cpp). A build links exactly one.

#include <optional>

#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/util/HeaderOnlyArrayRef.h>

namespace geglu_stable {

using Tensor = torch::stable::Tensor;
using OptTensor = std::optional<Tensor>;

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
// 1-32 tokens): y = gelu(x @ w_gate.T + b_gate) * (x @ w_up.T + b_up) @ w_down.T + b_down +
// residual as a new contiguous tensor of out_shape ([..., N], M rows), with h in the same
// allocation (one call to the allocator instead of two; h is no tensor of its own), or
// std::nullopt. Operands as fused_gate_up's and fused_down's, checked by the caller.
OptTensor fused_small_batch_mlp(const Tensor &x, const Tensor &w_gate, const Tensor &w_up, const OptTensor &b_gate,
                                const OptTensor &b_up, const Tensor &w_down, const OptTensor &b_down,
                                const OptTensor &residual, bool tanh,
                                torch::headeronly::IntHeaderOnlyArrayRef out_shape);

#if defined(CUDA_KERNEL)
// Whether the CUDA backend has FP8 MLP kernels for x's device (_geglu_mlp_fp8_serves):
// the sm_90 engine.
bool fp8_mlp_served(const Tensor &x);

// The block-scaled FP8 GeGLU MLP (_geglu_mlp_fp8, geglu_kernels/ops/geglu_mlp_fp8.cpp): x [M, K]
// bf16/fp16 contiguous, e4m3 weights [hidden, K], [hidden, K], [N, hidden] with float32
// 128x128 block scales, all contiguous and checked by the caller; a new tensor of
// out_shape ([..., N], M rows). Only where fp8_mlp_served(x).
Tensor fused_fp8_mlp(const Tensor &x, const Tensor &w_gate, const Tensor &w_gate_scale, const Tensor &w_up,
                     const Tensor &w_up_scale, const Tensor &w_down, const Tensor &w_down_scale,
                     const OptTensor &residual, bool tanh, torch::headeronly::IntHeaderOnlyArrayRef out_shape);

// The block-scaled FP8 linear (_fp8_linear, geglu_kernels/ops/geglu_mlp_fp8.cpp): x [M, K]
// bf16/fp16 contiguous, weight e4m3 [N, K] with float32 128x128 block scales, residual
// [M, N] of x's dtype, contiguous and 16-byte aligned, or none; all checked by the caller.
// x quantized per 1x128 group as fused_fp8_mlp quantizes it, then the FP8 MLP's down GEMM;
// at 1-16 tokens one decode kernel that quantizes x itself. A new tensor of out_shape
// ([..., N], M rows). Only where fp8_mlp_served(x).
Tensor fused_fp8_linear(const Tensor &x, const Tensor &weight, const Tensor &weight_scale, const OptTensor &residual,
                        torch::headeronly::IntHeaderOnlyArrayRef out_shape);

// The inference bias + GELU GEMM _linear_bias_gelu asks the CUDA backend for:
// gelu(x @ weight.T + bias) as a new [M, N] tensor, or std::nullopt where it has no
// faster kernel than cuBLAS for the call. x is [M, K] with M, K > 0, weight [N, K].
OptTensor fused_linear_gelu(const Tensor &x, const Tensor &weight, const OptTensor &bias, bool tanh);
#endif

}  // namespace geglu_stable
