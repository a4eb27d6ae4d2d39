#pragma once
// float32 to e4m3 for the FP8 MLP's activation quantization (fp8_mlp_sm90.h states the
// rule): the conversion, the correctly rounded quotient by a group's scale, and a
// 128-column group's scale and values as 16 lanes hold them. The quantization pass
// (fp8_quantize_rows.cu) and the decode kernels' in-kernel quantization of x
// (fp8_decode_sm90.cu) both compute it with these, so their bits agree.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace fp8_convert {

// Two floats to e4m3 (round to nearest even, saturating to +-448), the first in the low byte.
__device__ __forceinline__ uint32_t e4m3x2(float lo, float hi) {
  uint16_t v;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(v) : "f"(hi), "f"(lo));
  return v;
}

// v / scale correctly rounded, as __fdiv_rn gives it, from one reciprocal: r = 1 / scale,
// q = v * r, then one FMA step on the exact remainder v - q * scale. bf16 inputs often
// divide exactly onto e4m3 ties (x / scale = 184.0, between 176 and 192), where the raw
// product v * r would land one ulp off and round the other way; the corrected quotient is
// exact there. An IEEE division per element (a ~20-instruction subroutine) held this
// bandwidth-bound pass at half the copy rate.
__device__ __forceinline__ float div_by_scale(float v, float scale, float r) {
  const float q = v * r;
  return fmaf(fmaf(-q, scale, v), r, q);
}

// 8 bf16 (T = __nv_bfloat16) or fp16 values, loaded as one 16-byte word, as floats (exact).
template <class T>
__device__ __forceinline__ void unpack8(uint4 v, float (&f)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float2 p;
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      p = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w[i]));
    } else {
      p = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
    }
    f[2 * i] = p.x;
    f[2 * i + 1] = p.y;
  }
}

// A 128-column group held 8 values a lane by 16 consecutive lanes (every lane of the warp
// calls; a lane with no data passes 0): the group's scale, amax / 448, or 1 where amax is 0.
__device__ __forceinline__ float group_scale(float lane_amax) {
  float amax = lane_amax;
#pragma unroll
  for (int o = 8; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  return amax > 0.0f ? amax / 448.0f : 1.0f;
}

// A lane's 8 values of the group as e4m3(v / scale), the quotients correctly rounded, in
// two words (the first value in the low byte).
__device__ __forceinline__ uint2 quantize8(const float (&v)[8], float scale) {
  const float r = __frcp_rn(scale);
  float d[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) d[i] = div_by_scale(v[i], scale, r);
  return make_uint2(e4m3x2(d[0], d[1]) | (e4m3x2(d[2], d[3]) << 16), e4m3x2(d[4], d[5]) | (e4m3x2(d[6], d[7]) << 16));
}

}  // namespace fp8_convert
