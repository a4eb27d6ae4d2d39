#pragma once
// Fused GeGLU GEMM for Hopper (sm_90a), plain C ABI (no torch, no CUDA headers):
//
//   out[m, h] = gelu(sum_k x[m, k] Wg[h, k] + bg[h]) * (sum_k x[m, k] Wu[h, k] + bu[h])
//
// x [M, K] row-major (row stride ldx), Wg and Wu [H, K] row-major (nn.Linear layout, row
// stride ldw, both the same), out [M, H] row-major (row stride ldo); all strides in
// elements. Storage bf16 or fp16, float32 accumulation and float32 epilogue math.
// A merged [2H, K] weight W is w_gate = W, w_up = W + H*ldw. Wg and Wu may be any two
// pointers (no relation between them is assumed); nothing is copied, no state is kept
// on the device.
//
// Asynchronous on `stream` (a cudaStream_t): no host synchronization, no device
// allocation; CUDA-graph capturable (the first call for a kernel variant sets its
// shared-memory attribute, so make one call before capturing).
//
// Returns 0 on success (also for M == 0: nothing to do). Any nonzero value means
// nothing was launched and the caller should fall back; geglu_gemm_sm90_status_string()
// describes it.
//
// Supported: any M >= 0, K >= 1, H >= 1 (each < 2^31; no tile-multiple requirement: the
// last tiles are bounded by TMA and predicated stores), bf16/fp16, with or without
// either bias, tanh or exact GELU, Wg/Wu anywhere (merged, separate, Wu before Wg).
// Unsupported (status, no launch): K*2, ldx*2, ldw*2 or ldo*2 bytes not a multiple of
// 16; x, w_gate, w_up, out not 16-byte aligned; a bias not 4-byte aligned; other
// dtypes; a device other than compute capability 9.0.
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
  GEGLU_SM90_OK = 0,
  GEGLU_SM90_ERR_DTYPE = 1,       // dtype is not GEGLU_SM90_BF16 / GEGLU_SM90_FP16
  GEGLU_SM90_ERR_SHAPE = 2,       // M < 0, K < 1, H < 1, a size >= 2^31, or ldx < K, ldw < K, ldo < H
  GEGLU_SM90_ERR_STRIDE = 3,      // K, ldx, ldw or ldo times the element size not a multiple of 16 bytes
  GEGLU_SM90_ERR_ALIGN = 4,       // x, w_gate, w_up or out not 16-byte aligned or null; a bias not 4-byte aligned
  GEGLU_SM90_ERR_DEVICE = 5,      // current device is not compute capability 9.0 (or not queryable)
  GEGLU_SM90_ERR_CONFIG = 6,      // config index out of range
  GEGLU_SM90_ERR_CUTLASS = 7,     // CUTLASS rejected the problem (can_implement / initialize)
  GEGLU_SM90_ERR_CUDA = 8         // a CUDA call failed (attribute, launch): geglu_gemm_sm90_last_cuda_error()
};

enum { GEGLU_SM90_BF16 = 0, GEGLU_SM90_FP16 = 1 };

// b_gate / b_up: [H] of the same dtype, contiguous, or NULL (no bias); either may be
// given alone. approximate: nonzero = tanh form, 0 = exact (erf).
// config: -1 picks the kernel variant by shape (what the product route, fused_gate_up, passes).
// Otherwise (tuning) bits 0-7 name the variant, 0 .. geglu_gemm_sm90_num_configs()-1;
// bits 8-11 the tile scheduler's swizzle (0: 1, c: 2^(c-1), c <= 4); bits 12-15 the
// raster order (0 heuristic, 1 along M, 2 along N); higher bits 0.
// The library built from geglu_gemm_sm90.cu has the four variants the pick uses:
// 0 pingpong 64x(2x128) cluster 1, 1 cooperative 128x(2x128) cluster 2, 2 pingpong
// 128x(2x64) cluster 2, 3 pingpong 64x(2x64) cluster 1. The tuning build
// (tools/sm90_gemm/build.sh) exports this same ABI with those four under the same
// numbers and its tuning variants from 4 on (and bit 16: store nothing, for timing the
// rest).
int geglu_gemm_sm90(const void* x, int64_t M, int64_t K, int64_t ldx,
                    const void* w_gate, const void* w_up, int64_t ldw,
                    const void* b_gate, const void* b_up,
                    void* out, int64_t H, int64_t ldo,
                    int dtype, int approximate, int config, void* stream);

// Static, NUL-terminated description of a status code.
const char* geglu_gemm_sm90_status_string(int status);

// The cudaError_t value behind this thread's last GEGLU_SM90_ERR_CUDA (the launcher
// clears it from the CUDA runtime's last-error slot).
int geglu_gemm_sm90_last_cuda_error(void);

// Kernel variants (schedule, tile, cluster) that `config` may name: their number and
// names ("" out of range).
int geglu_gemm_sm90_num_configs(void);
const char* geglu_gemm_sm90_config_name(int config);

// The (encoded) config that config = -1 would use for this shape.
int geglu_gemm_sm90_pick_config(int64_t M, int64_t K, int64_t H, int dtype);

#ifdef __cplusplus
}
#endif
