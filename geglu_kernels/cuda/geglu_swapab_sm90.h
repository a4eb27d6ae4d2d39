#pragma once
// The GeGLU gate/up for a few tokens on Hopper (sm_90a), plain C ABI (no torch, no CUDA
// headers): the weights on the wgmma's 128-row side, the tokens on its 16-wide side
// (geglu_swapab_sm90.cu has the design, docs/DESIGN.md the measurements). It computes
// what geglu_gemm_sm90() computes,
//
//   out[m, h] = gelu(x[m] . Wg[h] + bg[h]) * (x[m] . Wu[h] + bu[h])
//
// x [M, K] row-major (row stride ldx), Wg and Wu [H, K] row-major (nn.Linear layout, one
// row stride ldw; any two pointers: a merged [2H, K] weight is w_gate = W, w_up =
// W + H*ldw), out [M, H] (row stride ldo); strides in elements. bf16 or fp16 storage,
// float32 accumulation and epilogue math, one rounding per output. Biases ([H], the same
// dtype, contiguous) may be NULL. approximate: nonzero = tanh GELU, 0 = exact.
//
// Asynchronous on `stream` (a cudaStream_t); no host synchronization, no allocation,
// CUDA-graph capturable (the first call sets the kernel's shared-memory attribute: make
// one call before capturing). Returns GEGLU_SM90_OK (geglu_gemm_sm90.h's codes; also for
// M == 0) or, having launched nothing, a status for geglu_gemm_sm90_status_string().
//
// Supported: any M >= 0 (a tile per 16 tokens: the op takes it up to 32), K >= 1 and
// H >= 1 (each < 2^31, 2H too); K, ldx and ldw multiples of 8 elements with x and the
// weights 16-byte aligned (out and the biases need element alignment); a device of
// compute capability 9.0.
#include <stdint.h>

#include "sm90_status.h"

#ifdef __cplusplus
extern "C" {
#endif

int geglu_swapab_sm90(const void* x, int64_t M, int64_t K, int64_t ldx,
                      const void* w_gate, const void* w_up, int64_t ldw,
                      const void* b_gate, const void* b_up,
                      void* out, int64_t H, int64_t ldo,
                      int dtype, int approximate, void* stream);

#ifdef __cplusplus
}
#endif
