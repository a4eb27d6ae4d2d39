#pragma once
// What every Hopper C ABI here shares (geglu_gemm_sm90.h, geglu_swapab_sm90.h,
// decode_sm90.h, linear_swapab_sm90.h, mlp_fused_sm90.h, linear_gelu_sm90.h,
// fp8_mlp_sm90.h): the conventions below, the status codes the launchers return, the
// dtype values they take, and the two functions that describe a status (defined in
// geglu_gemm_sm90.cu). Plain C, no torch, no CUDA headers. Each header says what its
// entries compute and what they support beyond these conventions:
// - Matrices are row-major with row strides in elements (ldx, ldw, ...); weights are in
//   the nn.Linear layout [out features, in features]. Storage is bf16 or fp16 (`dtype`),
//   unless a header says otherwise, with float32 accumulation and epilogue math and one
//   rounding per output.
// - A call is asynchronous on `stream` (a cudaStream_t): no host synchronization, no
//   device allocation unless its header says so, CUDA-graph capturable. The first call of
//   a CUTLASS kernel sets its shared-memory attribute: make one call before capturing.
// - It returns GEGLU_SM90_OK on success, also for M == 0 (nothing to do). Any other
//   status means nothing was launched and the caller falls back;
//   geglu_gemm_sm90_status_string() describes it.
// - It needs a current device of compute capability 9.0 (else GEGLU_SM90_ERR_DEVICE).
#include <stdint.h>

// The C linkage of the ABIs' declarations, for C and C++ includers alike.
#ifdef __cplusplus
#define GEGLU_SM90_BEGIN_C_DECLS extern "C" {
#define GEGLU_SM90_END_C_DECLS }
#else
#define GEGLU_SM90_BEGIN_C_DECLS
#define GEGLU_SM90_END_C_DECLS
#endif

GEGLU_SM90_BEGIN_C_DECLS

enum {
  GEGLU_SM90_OK = 0,
  GEGLU_SM90_ERR_DTYPE = 1,       // dtype is not GEGLU_SM90_BF16 / GEGLU_SM90_FP16
  GEGLU_SM90_ERR_SHAPE = 2,       // M < 0, K < 1, H < 1, a size >= 2^31, or ldx < K, ldw < K, ldo < H
  GEGLU_SM90_ERR_STRIDE = 3,      // K, ldx, ldw or ldo times the element size not a multiple of 16 bytes
  GEGLU_SM90_ERR_ALIGN = 4,       // x, w_gate, w_up or out not 16-byte aligned or null; a bias not 4-byte aligned
  GEGLU_SM90_ERR_DEVICE = 5,      // current device is not compute capability 9.0 (or not queryable)
  GEGLU_SM90_ERR_CONFIG = 6,      // a kernel variant out of range (the tuning libraries' configs)
  GEGLU_SM90_ERR_CUTLASS = 7,     // CUTLASS rejected the problem (can_implement / initialize)
  GEGLU_SM90_ERR_CUDA = 8         // a CUDA call failed (attribute, launch): geglu_gemm_sm90_last_cuda_error()
};

enum { GEGLU_SM90_BF16 = 0, GEGLU_SM90_FP16 = 1 };

// Static, NUL-terminated description of a status code.
const char* geglu_gemm_sm90_status_string(int status);

// The cudaError_t value behind this thread's last GEGLU_SM90_ERR_CUDA (the launcher
// clears it from the CUDA runtime's last-error slot).
int geglu_gemm_sm90_last_cuda_error(void);

GEGLU_SM90_END_C_DECLS
