#pragma once
// The down projection of a GeGLU MLP at decode on Hopper (sm_90a), plain C ABI (no torch,
// no CUDA headers): a weight stream for the token counts where it beats cuBLAS's addmm
// (decode_sm90.cu has the design, docs/DESIGN.md the measurements).
//
//   out[m, n] = x[m] . W[n] + bias[n] + residual[m, n]
//
// x [M, K] (row stride ldx), W [N, K] row-major (nn.Linear layout, row stride ldw), out
// [M, N] (ldo); strides in elements. bias [N] and residual [M, N] (row stride ldr) may be
// NULL. Each block reads 8 rows of W, each row cut at the middle of K into two segments
// multiplied side by side, so the grid has N / 8 blocks with no reduction between them.
// bf16 or fp16 storage, float32 accumulation and epilogue math, one rounding per output.
//
// Asynchronous on `stream` (a cudaStream_t); no host synchronization, no allocation,
// CUDA-graph capturable. Returns GEGLU_SM90_OK (geglu_gemm_sm90.h's codes; also for
// M == 0) or, having launched nothing, a status for geglu_gemm_sm90_status_string().
//
// Supported: 0 <= M <= GEGLU_DECODE_LINEAR_MAX_M, K >= 1 and N >= 1 (each < 2^31); K, ldx
// and ldw multiples of 8 elements with x and W 16-byte aligned (out, the bias and the
// residual need element alignment); a device of compute capability 9.0.
#include <stdint.h>

#include "sm90/common/sm90_status.h"

GEGLU_SM90_BEGIN_C_DECLS

enum { GEGLU_DECODE_LINEAR_MAX_M = 4 };

int geglu_decode_sm90_linear(const void* x, int64_t M, int64_t K, int64_t ldx,
                             const void* w, int64_t ldw, const void* bias,
                             const void* residual, int64_t ldr,
                             void* out, int64_t N, int64_t ldo,
                             int dtype, void* stream);

// The largest N for which geglu_decode_sm90_linear's grid fits on the current device at
// once (one wave of blocks): beyond, the blocks of a second wave run alone after the
// first and the kernel loses to cuBLAS (Gemma-2-27B's down projection, 576 blocks for
// 528 places on an H200: 106.6 us against 86.8). Queried once per device; 0 where the
// device is not compute capability 9.0 or CUDA failed.
int64_t geglu_decode_sm90_linear_max_n(void);

GEGLU_SM90_END_C_DECLS
