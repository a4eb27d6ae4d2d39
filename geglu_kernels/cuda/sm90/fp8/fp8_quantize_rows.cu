// x [M, K] (bf16 / fp16) to e4m3 with one float32 scale per row and 128-column group:
// the FP8 MLP's activation quantization (fp8_mlp_sm90.h states the rule). One pass,
// bandwidth bound: 16 threads per group, 8 elements (16 bytes) each; the group's amax is
// a max over those 16 lanes. The scales go out M-major (s[g * ld_s + m]), the layout the
// gate/up GEMM loads with TMA.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "sm90/fp8/fp8_convert.cuh"
#include "sm90/fp8/fp8_mlp_sm90.h"
#include "sm90/common/sm90_status.h"
#include "sm90/common/sm90_launcher.cuh"

namespace fp8_sm90 {
namespace {

constexpr int kThreadsPerGroup = 16;  // fp8_convert::group_scale's lanes
constexpr int kBlockThreads = 256;

template <class T>
__global__ void __launch_bounds__(kBlockThreads) quantize_rows_kernel(const uint16_t* __restrict__ x, int64_t ldx,
                                                                      int64_t M, int64_t groups_per_row,
                                                                      uint8_t* __restrict__ q, float* __restrict__ s,
                                                                      int64_t ld_s) {
  const int64_t group = (int64_t(blockIdx.x) * kBlockThreads + threadIdx.x) / kThreadsPerGroup;
  const int lane = threadIdx.x % kThreadsPerGroup;
  const bool live = group < M * groups_per_row;
  const int64_t row = live ? group / groups_per_row : 0;
  const int64_t g = live ? group % groups_per_row : 0;
  const int64_t col = g * 128 + lane * 8;
  float f[8];
  float amax = 0.0f;
  if (live) {
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(x + row * ldx + col));
    fp8_convert::unpack8<T>(v, f);
#pragma unroll
    for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(f[i]));
  }
  const float scale = fp8_convert::group_scale(amax);
  if (!live) return;
  *reinterpret_cast<uint2*>(q + row * (groups_per_row * 128) + col) = fp8_convert::quantize8(f, scale);
  if (lane == 0) s[g * ld_s + row] = scale;
}

}  // namespace
}  // namespace fp8_sm90

extern "C" int geglu_fp8_quantize_rows(const void* x, int64_t ldx, int64_t M, int64_t K, int dtype, void* q,
                                       float* s, int64_t ld_s, void* stream) {
  using namespace fp8_sm90;
  if (dtype != GEGLU_SM90_BF16 && dtype != GEGLU_SM90_FP16) return GEGLU_SM90_ERR_DTYPE;
  if (M < 0 || K < 128 || K % 128 != 0 || ldx < K || ld_s < M) return GEGLU_SM90_ERR_SHAPE;
  if (ldx % 8 != 0) return GEGLU_SM90_ERR_STRIDE;
  if ((reinterpret_cast<uintptr_t>(x) & 15u) || (reinterpret_cast<uintptr_t>(q) & 15u) ||
      (reinterpret_cast<uintptr_t>(s) & 3u)) {
    return GEGLU_SM90_ERR_ALIGN;
  }
  if (M == 0) return GEGLU_SM90_OK;
  const int64_t groups = M * (K / 128);
  const int64_t blocks = (groups * kThreadsPerGroup + kBlockThreads - 1) / kBlockThreads;
  if (blocks >= (int64_t(1) << 31)) return GEGLU_SM90_ERR_SHAPE;
  const auto kernel = dtype == GEGLU_SM90_BF16 ? quantize_rows_kernel<__nv_bfloat16> : quantize_rows_kernel<__half>;
  kernel<<<unsigned(blocks), kBlockThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const uint16_t*>(x), ldx, M, K / 128, static_cast<uint8_t*>(q), s, ld_s);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    sm90_launcher::record_cuda_error(e);
    return GEGLU_SM90_ERR_CUDA;
  }
  return GEGLU_SM90_OK;
}
