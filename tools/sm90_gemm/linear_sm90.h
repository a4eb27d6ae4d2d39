#pragma once
// Small-M linear for Hopper (sm_90a), plain C ABI (no torch, no CUDA headers):
//
//   out[b][m, n] = sum_k x[m, k] W[b][n, k] + bias[n] + residual[m, n]      (b < batch)
//
// The decode-time GEMM of an MLP (M = tokens, a few to a few hundred; N, K the model's
// widths): its cost is reading W once. It runs "swap-AB" on CUTLASS 3.x: the problem
// handed to the GEMM is out^T = W x^T, so the weight rows fill the 128-row side of the
// wgmma tile and the tokens its narrow 16..64-column side, and a stream-K tile scheduler
// spreads the K loop of the few output tiles over every SM (split-K where the output has
// fewer tiles than the GPU has SMs, as the down projection does).
//
// x [M, K] row-major (row stride ldx), W [N, K] row-major (nn.Linear layout, row stride
// ldw), out and residual [M, N] row-major (row strides ldo, ldr); strides in elements.
// batch > 1 (gate and up in one launch) reads W[b] = w + b * w_batch_stride and writes
// out[b] = out + b * out_batch_stride; bias and residual must then be NULL.
// Storage bf16 or fp16, float32 accumulation, bias and residual added in float32.
//
// Asynchronous on `stream` (a cudaStream_t): no host synchronization; the caller passes
// a device workspace of linear_sm90_workspace_size() bytes (its flags are cleared by a
// cudaMemsetAsync on the stream, so calls may reuse it in stream order). CUDA-graph
// capturable after one call per kernel variant (which sets its shared-memory attribute).
//
// Returns 0 on success (also for M == 0). Any nonzero value means nothing was launched;
// linear_sm90_status_string() describes it. Unsupported: K, N, ldx, ldw, ldo, ldr times
// the element size not multiples of 16 bytes; pointers not 16-byte aligned (bias: 4);
// sizes >= 2^31; a device other than compute capability 9.0.
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
  LINEAR_SM90_OK = 0,
  LINEAR_SM90_ERR_DTYPE = 1,
  LINEAR_SM90_ERR_SHAPE = 2,
  LINEAR_SM90_ERR_STRIDE = 3,
  LINEAR_SM90_ERR_ALIGN = 4,
  LINEAR_SM90_ERR_DEVICE = 5,
  LINEAR_SM90_ERR_CONFIG = 6,
  LINEAR_SM90_ERR_CUTLASS = 7,
  LINEAR_SM90_ERR_CUDA = 8,
  LINEAR_SM90_ERR_WORKSPACE = 9
};

enum { LINEAR_SM90_BF16 = 0, LINEAR_SM90_FP16 = 1 };

// config: -1 picks the variant by shape. Otherwise (tuning) bits 0-7 the variant,
// bits 8-11 the stream-K decomposition (0 heuristic, 1 stream-K, 2 split-K, 3 data
// parallel), bits 12-19 the split count for split-K, bit 20 reduce partials in
// arrival order (nondeterministic).
int linear_sm90_workspace_size(int64_t M, int64_t N, int64_t K, int batch, int dtype, int config,
                               size_t* bytes);

int linear_sm90(const void* x, int64_t M, int64_t K, int64_t ldx,
                const void* w, int64_t N, int64_t ldw, int64_t w_batch_stride, int batch,
                const void* bias, const void* residual, int64_t ldr,
                void* out, int64_t ldo, int64_t out_batch_stride,
                int dtype, int config, void* workspace, size_t workspace_bytes, void* stream);

const char* linear_sm90_status_string(int status);
int linear_sm90_last_cuda_error(void);
int linear_sm90_num_configs(void);
const char* linear_sm90_config_name(int config);

#ifdef __cplusplus
}
#endif
