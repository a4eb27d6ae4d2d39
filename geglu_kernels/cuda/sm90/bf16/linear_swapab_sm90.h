#pragma once
// The down projection of a GeGLU MLP for a few tokens on Hopper (sm_90a), plain C ABI
// (the conventions of sm90_status.h): the weights on the wgmma's 128-row side, the tokens on its
// 16-wide side, K split so that every SM streams weights (linear_swapab_sm90.cu has the
// design, docs/DESIGN.md the measurements).
//
//   out[m, n] = x[m] . W[n] + bias[n] + residual[m, n]
//
// x [M, K] (row stride ldx), W [N, K] (row stride ldw), out [M, N] (row stride ldo).
// bias [N] and residual [M, N] (row stride ldr) may be NULL. The K splits' float32
// partial sums go to `workspace`, and the last split of each output tile to finish adds
// them in split order (the result is the same on every call), with the bias and the
// residual.
//
// Allocation: the first call on a stream, and the first of each CUDA-graph capture,
// allocates its tile arrival counters (4 KB and up, kept for the process) and zeroes them
// on a private stream, synchronously, outside the capture under way; every other call
// neither allocates nor synchronizes. Calls on different streams and replays of different
// graphs may run at the same time.
//
// Supported: any M >= 0 (a tile per 16 tokens), K >= 1 and N >= 1 (each < 2^31); K, ldx
// and ldw multiples of 8 elements with x and W 16-byte aligned (out, the bias and the
// residual need element alignment); workspace 16-byte aligned with at least
// geglu_linear_swapab_sm90_workspace_bytes(M, K, N) bytes.
#include <stdint.h>

#include "sm90/common/sm90_status.h"

GEGLU_SM90_BEGIN_C_DECLS

// The workspace a call of these sizes needs on the current device (its SM count picks the
// split of K); 0 where the device is not compute capability 9.0.
int64_t geglu_linear_swapab_sm90_workspace_bytes(int64_t M, int64_t K, int64_t N);

int geglu_linear_swapab_sm90(const void* x, int64_t M, int64_t K, int64_t ldx,
                             const void* w, int64_t ldw, const void* bias,
                             const void* residual, int64_t ldr,
                             void* out, int64_t N, int64_t ldo,
                             void* workspace, int64_t workspace_bytes,
                             int dtype, void* stream);

GEGLU_SM90_END_C_DECLS
