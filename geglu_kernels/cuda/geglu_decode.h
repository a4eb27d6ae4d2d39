#pragma once
// Small-M ("decode") GEMMs at the weight-read floor, for M = 1..64 tokens
// (geglu_decode.cu): the gate/up GEMM with the GeGLU epilogue and the down GEMM with
// bias and residual. Weights [n, K] row-major (nn.Linear layout), read once, in place;
// bf16 / fp16 storage, float32 accumulation and epilogue math.
//
// Each call launches on the current CUDA stream of the tensors' device; it allocates its
// result (and, where the plan splits K across blocks, a small float32 workspace and a
// counter array) through the caching allocator: no host sync, no cudaMalloc, no branch on
// data, so a call can be captured in a CUDA graph.

#include <cstdint>

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Optional.h>

namespace geglu_decode {

// The most tokens the decode kernels take.
constexpr int64_t kMaxTokens = 64;

// Whether the decode kernels take an [m, k] x [n_out, k] problem of this dtype: the
// crossover measured against the GEMM routes (benchmarks/bench_decode.py,
// benchmarks/results/decode_h100.log). n_out counts the weight rows read: 2 * hidden for
// gate/up, out_features for the down GEMM. Cheap, host only; says nothing about
// alignment (aligned16).
bool serves(int64_t m, int64_t k, int64_t n_out, at::ScalarType dtype);

// What the kernels' 16-byte vector loads need of an operand (x / h, or a weight): a 2-d
// tensor of unit column stride whose base address, row stride and row width (K) are
// multiples of 16 bytes. Host only, no sync.
bool aligned16(const at::Tensor &t);

// x [M, K] (row stride any, unit column stride); w_gate/w_up [H, K] sharing one row
// stride; biases [H] contiguous or none. Returns a new [M, H] tensor:
// gelu(x @ w_gate.T + b_gate) * (x @ w_up.T + b_up), tanh or exact (erf) GELU.
at::Tensor gate_up(const at::Tensor &x, const at::Tensor &w_gate, const at::Tensor &w_up,
                   const c10::optional<at::Tensor> &b_gate, const c10::optional<at::Tensor> &b_up, bool tanh);

// h [M, K], w [N, K]; bias [N] or none; residual [M, N] or none. Returns a new [M, N]
// tensor: h @ w.T + bias + residual.
at::Tensor linear(const at::Tensor &h, const at::Tensor &w, const c10::optional<at::Tensor> &bias,
                  const c10::optional<at::Tensor> &residual);

}  // namespace geglu_decode
