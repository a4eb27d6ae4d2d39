#pragma once
// Small-M GEMMs for decode on Hopper (sm_90a), plain C ABI (no torch, no CUDA headers).
// At 1..64 tokens a GeGLU MLP is a weight read: these kernels stream each weight row once
// with 16-byte loads that skip L1, on tensor cores with the weights as the 16-row side of
// mma.sync (the tokens are its 8-wide side), each block's K range split over its warps
// and, where there are too few row blocks to fill the GPU, over a thread-block cluster
// reduced through distributed shared memory (deterministic, no workspace). See
// decode_sm90.cu for the layout.
//
//   geglu_decode_sm90_gate_up: out[m, h] = gelu(x[m] . Wg[h] + bg[h]) * (x[m] . Wu[h] + bu[h])
//   geglu_decode_sm90_linear:  out[m, n] = x[m] . W[n] + bias[n] + residual[m, n]
//
// Row-major operands with row strides in elements: x [M, K] (ldx), weights [rows, K]
// (ldw; Wg and Wu share it and may be any two pointers: a merged [2H, K] weight is
// w_gate = W, w_up = W + H*ldw), out [M, H or N] (ldo), residual [M, N] (ldr). bf16 or
// fp16 storage, float32 accumulation and epilogue math, one rounding of each output.
// Biases ([H] / [N], the same dtype, contiguous) and the residual may be NULL.
//
// Asynchronous on `stream` (a cudaStream_t); no host synchronization, no allocation,
// CUDA-graph capturable. Returns GEGLU_SM90_OK (geglu_gemm_sm90.h's codes; also for
// M == 0) or, having launched nothing, a status for geglu_gemm_sm90_status_string().
//
// Supported: 0 <= M <= GEGLU_DECODE_MAX_M, K >= 1 and rows >= 1 (each < 2^31), K, ldx and
// ldw multiples of 8 elements with x and the weights 16-byte aligned; out, the biases and
// the residual need only element alignment. A device of compute capability 9.0.
#include <stdint.h>

#include "geglu_gemm_sm90.h"  // status codes and dtype values

#ifdef __cplusplus
extern "C" {
#endif

enum { GEGLU_DECODE_MAX_M = 16 };

// config: -1 picks the K split by shape (what the ops pass); otherwise (tuning) the
// number of thread blocks, 1..8, that split each row block's K range as one cluster.
int geglu_decode_sm90_gate_up(const void* x, int64_t M, int64_t K, int64_t ldx,
                              const void* w_gate, const void* w_up, int64_t ldw,
                              const void* b_gate, const void* b_up,
                              void* out, int64_t H, int64_t ldo,
                              int dtype, int approximate, int config, void* stream);

int geglu_decode_sm90_linear(const void* x, int64_t M, int64_t K, int64_t ldx,
                             const void* w, int64_t N, int64_t ldw, const void* bias,
                             const void* residual, int64_t ldr,
                             void* out, int64_t ldo, int dtype, int config, void* stream);

#ifdef __cplusplus
}
#endif
