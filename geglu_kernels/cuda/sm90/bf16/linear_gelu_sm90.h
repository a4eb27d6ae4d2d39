#pragma once
// GEMM with bias and GELU in the epilogue for Hopper (sm_90a), plain C ABI:
//
//   out[m, n] = gelu(sum_k x[m, k] W[n, k] + bias[n])       (exact erf or tanh form)
//
// The bias + GELU linear of BERT / GPT-2 intermediates. cuBLASLt has a GELU_BIAS
// epilogue for the tanh form only; the exact form otherwise costs a second pass over
// the [M, N] output. Layouts, dtypes, status codes and the stream / graph rules are the
// GeGLU engine's (geglu_gemm_sm90.h): x [M, K], W [N, K] (nn.Linear), out [M, N], all
// row-major with row strides in elements; bias [N] contiguous or NULL; bf16 or fp16
// storage, float32 accumulation and epilogue; sm_90 only; K, N, ldx, ldw, ldo times 2
// bytes multiples of 16, x / W / out 16-byte aligned, bias 4-byte aligned.
#include <stdint.h>

#include "sm90/common/sm90_status.h"

GEGLU_SM90_BEGIN_C_DECLS

// approximate: nonzero = tanh form, 0 = exact. Returns GEGLU_SM90_OK or a status
// geglu_gemm_sm90_status_string() describes (nothing was launched; the CUDA error of
// GEGLU_SM90_ERR_CUDA is geglu_gemm_sm90_last_cuda_error()).
int linear_gelu_sm90(const void* x, int64_t M, int64_t K, int64_t ldx,
                     const void* w, int64_t N, int64_t ldw, const void* bias,
                     void* out, int64_t ldo, int dtype, int approximate, void* stream);

GEGLU_SM90_END_C_DECLS
