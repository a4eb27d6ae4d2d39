#pragma once
// Fused GeGLU GEMM for Hopper (sm_90a), plain C ABI (the conventions of sm90_status.h):
//
//   out[m, h] = gelu(sum_k x[m, k] Wg[h, k] + bg[h]) * (sum_k x[m, k] Wu[h, k] + bu[h])
//
// x [M, K] (row stride ldx), Wg and Wu [H, K] (one row stride ldw), out [M, H] (row
// stride ldo). A merged [2H, K] weight W is w_gate = W, w_up = W + H*ldw. Wg and Wu may
// be any two pointers (no relation between them is assumed); nothing is copied, no state
// is kept on the device. geglu_swapab_sm90.h has the same entry for a few tokens.
//
// Supported: any M >= 0, K >= 1, H >= 1 (each < 2^31; no tile-multiple requirement: the
// last tiles are bounded by TMA and predicated stores), with or without either bias,
// tanh or exact GELU, Wg/Wu anywhere (merged, separate, Wu before Wg).
// Unsupported (status, no launch): K*2, ldx*2, ldw*2 or ldo*2 bytes not a multiple of
// 16; x, w_gate, w_up, out not 16-byte aligned; a bias not 4-byte aligned.
#include <stdint.h>

#include "sm90/common/sm90_status.h"  // status codes, dtype values, geglu_gemm_sm90_status_string()

GEGLU_SM90_BEGIN_C_DECLS

// b_gate / b_up: [H] of the same dtype, contiguous, or NULL (no bias); either may be
// given alone. approximate: nonzero = tanh form, 0 = exact (erf). The kernel variant
// (tile, schedule, cluster) is picked by shape. The tuning library of tools/sm90_gemm
// exports the same entry with a config argument that names the variant instead.
int geglu_gemm_sm90(const void* x, int64_t M, int64_t K, int64_t ldx,
                    const void* w_gate, const void* w_up, int64_t ldw,
                    const void* b_gate, const void* b_up,
                    void* out, int64_t H, int64_t ldo,
                    int dtype, int approximate, void* stream);

GEGLU_SM90_END_C_DECLS
