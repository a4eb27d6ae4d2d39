#pragma once
// float32 to e4m3 for the FP8 MLP's activation quantization (fp8_mlp_sm90.h states the
// rule): the conversion and the correctly rounded quotient by a group's scale.

#include <cstdint>

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

}  // namespace fp8_convert
