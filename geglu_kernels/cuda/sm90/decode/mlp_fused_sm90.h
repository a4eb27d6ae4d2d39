#pragma once
// The GeGLU MLP for a few tokens on Hopper (sm_90a) in one kernel, plain C ABI (the
// conventions of sm90_status.h): the swap-AB gate/up and the split-K down projection as the work
// units of one persistent kernel (mlp_fused_sm90.cu has the design, docs/DESIGN.md the
// measurements).
//
//   h[m, j] = gelu(x[m] . Wg[j] + bg[j]) * (x[m] . Wu[j] + bu[j])
//   y[m, n] = h[m] . Wd[n] + bd[n] + residual[m, n]
//
// x [M, D] (row stride ldx); Wg, Wu [H, D] (row stride ldw, any two pointers: a merged
// [2H, D] weight is Wu = Wg + H * ldw); Wd [D, H] (row stride ldwd); h [M, H] (row stride
// ldh), written on the way, rounded to the storage dtype as the two-kernel route stores
// it; y [M, D] (row stride ldo). bg, bu [H], bd [D] and residual [M, D] (row stride ldr)
// may be NULL. GELU tanh (approximate != 0) or exact. The down projection's split partial
// sums go to `workspace` (float32) and are added in split order: the result is the same
// on every call.
//
// Launched cooperatively: every CTA resident at once (the units wait on each other).
// Where CUDA refuses that (GEGLU_SM90_ERR_CUDA with cudaErrorCooperativeLaunchTooLarge in
// geglu_gemm_sm90_last_cuda_error(): MPS or green contexts leaving fewer SMs) nothing
// was launched. The first call on a stream, and the first of each capture, allocates its
// counters as linear_swapab_sm90.h describes.
//
// Supported: any M >= 0 (a tile per 16 tokens), D >= 1 and H >= 1 (2H < 2^31); D, H,
// ldx, ldw, ldwd and ldh multiples of 8 elements with x, the weights, h and the workspace
// 16-byte aligned (y, the biases and the residual need element alignment); workspace of
// at least geglu_mlp_fused_sm90_workspace_bytes(M, D, H) bytes.
#include <stdint.h>

#include "sm90/common/sm90_status.h"

GEGLU_SM90_BEGIN_C_DECLS

int64_t geglu_mlp_fused_sm90_workspace_bytes(int64_t M, int64_t D, int64_t H);

int geglu_mlp_fused_sm90(const void* x, int64_t M, int64_t D, int64_t ldx,
                         const void* w_gate, const void* w_up, int64_t ldw,
                         const void* b_gate, const void* b_up,
                         const void* w_down, int64_t ldwd, const void* b_down,
                         const void* residual, int64_t ldr,
                         void* h, int64_t H, int64_t ldh, void* out, int64_t ldo,
                         void* workspace, int64_t workspace_bytes,
                         int dtype, int approximate, void* stream);

GEGLU_SM90_END_C_DECLS
