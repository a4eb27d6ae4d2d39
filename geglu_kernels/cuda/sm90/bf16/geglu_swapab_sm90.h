#pragma once
// The GeGLU gate/up for a few tokens on Hopper (sm_90a), plain C ABI (the conventions of
// sm90_status.h): the weights on the wgmma's 128-row side, the tokens on its 16-wide side
// (geglu_swapab_sm90.cuh has the design, docs/DESIGN.md the measurements). It computes
// what geglu_gemm_sm90() computes, with the same arguments (geglu_gemm_sm90.h):
//
//   out[m, h] = gelu(x[m] . Wg[h] + bg[h]) * (x[m] . Wu[h] + bu[h])
//
// Supported: any M >= 0 (a tile per 16 tokens: the op takes it up to 32), K >= 1 and
// H >= 1 (each < 2^31, 2H too); K, ldx and ldw multiples of 8 elements with x and the
// weights 16-byte aligned (out and the biases need element alignment only).
#include <stdint.h>

#include "sm90/common/sm90_status.h"

GEGLU_SM90_BEGIN_C_DECLS

int geglu_swapab_sm90(const void* x, int64_t M, int64_t K, int64_t ldx,
                      const void* w_gate, const void* w_up, int64_t ldw,
                      const void* b_gate, const void* b_up,
                      void* out, int64_t H, int64_t ldo,
                      int dtype, int approximate, void* stream);

GEGLU_SM90_END_C_DECLS
