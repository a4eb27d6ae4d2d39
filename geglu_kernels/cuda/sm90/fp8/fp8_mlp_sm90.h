#pragma once
// The block-scaled FP8 GeGLU MLP's two GEMMs on Hopper (sm_90a), plain C ABI (no torch,
// no CUDA headers). Operands are float8_e4m3fn, K-major (nn.Linear layout for weights),
// contiguous; scales float32:
// - activation scales (x's and h's): one per row and 128-column group, stored M-major,
//   s[g * ld_s + m] for row m and group g; ld_s >= M and a multiple of 4 (TMA rows are
//   16-byte aligned);
// - weight scales: one per 128x128 block, [rows / 128, K / 128] row-major (Transformers'
//   `weight_scale_inv`).
// Dequantized values are e4m3 value * scale; accumulation in float32, each 128-deep K
// block promoted with its two scales.
//
// Asynchronous on `stream` (a cudaStream_t): no host synchronization, no allocation,
// CUDA-graph capturable (make one call per kernel before capturing: the first sets its
// shared-memory attribute). Return GEGLU_SM90_* codes (sm90_status.h); nonzero
// means nothing was launched.
//
// Supported: M >= 0; K, H, N multiples of 128 (each < 2^31); pointers 16-byte aligned
// (scales 4-byte); the current device of compute capability 9.0.
#include <stdint.h>

#include "sm90/common/sm90_status.h"

GEGLU_SM90_BEGIN_C_DECLS

// q[M, K] (contiguous), s = quantize_1x128(x): x [M, K] bf16 (dtype GEGLU_SM90_BF16) or
// fp16 with row stride ldx (a multiple of 8), per row and 128-column group scale = amax /
// 448 (1 where amax is 0), q = e4m3(x / scale) rounded to nearest even, saturating. Any
// CUDA device (the e4m3 conversion is an sm_89+ instruction; built for sm_90a here).
int geglu_fp8_quantize_rows(const void* x, int64_t ldx, int64_t M, int64_t K, int dtype, void* q, float* s,
                            int64_t ld_s, void* stream);

// Bytes of device workspace (16-byte aligned) the down GEMM below needs for these sizes on
// the current device: at up to 64 tokens it runs stream-K, whose partial sums and flags
// live there; 0 above (pass NULL).
int64_t geglu_fp8_sm90_workspace_bytes(int64_t M, int64_t H, int64_t N);

// hq[M, H], sh = quantize_1x128(gelu(deq(xq) @ deq(wg)^T) * (deq(xq) @ deq(wu)^T)):
// per row and 128-column group of h, scale = amax / 448 (1 where amax is 0), hq = e4m3(h *
// (1 / scale)) rounded to nearest even, saturating (the product is the quotient h / scale
// but for rare one-ulp differences). approximate: nonzero = tanh GELU, 0 = exact.
int geglu_fp8_sm90_gate_up(const void* xq, const float* sx, int64_t ld_sx, int64_t M, int64_t K,
                           const void* wg, const float* sg, const void* wu, const float* su, int64_t H,
                           void* hq, float* sh, int64_t ld_sh, int approximate, void* stream);

// out[M, N] = deq(hq) @ deq(wd)^T (+ residual[M, N]), in bf16 (dtype GEGLU_SM90_BF16) or
// fp16; residual of that dtype, contiguous, or NULL.
int geglu_fp8_sm90_down(const void* hq, const float* sh, int64_t ld_sh, int64_t M, int64_t H,
                        const void* wd, const float* sd, int64_t N, const void* residual, void* out,
                        int dtype, void* workspace, void* stream);

// At 1..GEGLU_FP8_DECODE_MAX_M tokens the MLP is a weight read: the same two GEMMs as
// weight-streaming kernels (fp8_decode_sm90.cu), each launched as a programmatic
// dependent of the kernel before it; the gate/up quantizes x itself (1x128, the bits
// geglu_fp8_quantize_rows gives), so the op is two launches. Same results as the two
// above up to float32 summation order; h is quantized as h / scale (correctly rounded).
// Both take the same device workspace (16-byte aligned) of
// geglu_fp8_decode_workspace_bytes(M, H, N) bytes for the current device (0: not served).
enum { GEGLU_FP8_DECODE_MAX_M = 16 };
int64_t geglu_fp8_decode_workspace_bytes(int64_t M, int64_t H, int64_t N);
// geglu_fp8_sm90_gate_up's hq and sh, from x [M, K] itself (bf16 or fp16 as dtype says,
// row stride ldx a multiple of 8, 16-byte aligned).
int geglu_fp8_decode_gate_up(const void* x, int64_t ldx, int64_t M, int64_t K, const void* wg, const float* sg,
                             const void* wu, const float* su, int64_t H, void* hq, float* sh, int64_t ld_sh,
                             int approximate, int dtype, void* workspace, void* stream);
// geglu_fp8_sm90_down's out (out and the residual need element alignment only).
int geglu_fp8_decode_down(const void* hq, const float* sh, int64_t ld_sh, int64_t M, int64_t H,
                          const void* wd, const float* sd, int64_t N, const void* residual, void* out,
                          int dtype, void* workspace, void* stream);
// One block-scaled linear at 1..GEGLU_FP8_DECODE_MAX_M tokens, one launch: out[M, N] =
// quantize_1x128(x) @ deq(w)^T (+ residual), x [M, K] as the gate/up's, quantized in the
// kernel; out and the residual of x's dtype. Workspace (16-byte aligned):
// geglu_fp8_decode_linear_workspace_bytes(M, K, N) bytes (0: not served).
int64_t geglu_fp8_decode_linear_workspace_bytes(int64_t M, int64_t K, int64_t N);
int geglu_fp8_decode_linear(const void* x, int64_t ldx, int64_t M, int64_t K, const void* w, const float* sw,
                            int64_t N, const void* residual, void* out, int dtype, void* workspace, void* stream);
GEGLU_SM90_END_C_DECLS
