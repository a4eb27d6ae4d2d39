#pragma once
// GELU and its derivative in float32, for both forms of torch.nn.functional.gelu:
//   exact:  gelu(x) = x * Phi(x),                  Phi = standard normal CDF
//   tanh:   gelu(x) = 0.5 x (1 + tanh(u)),          u = sqrt(2/pi) (x + 0.044715 x^3)
//
// Both are written so that the result keeps float32 relative accuracy (a few ulp)
// over the whole range, including the negative tail where gelu(x) is tiny: the
// textbook `1 + erf(.)` / `1 + tanh(.)` cancel there and lose every digit.

namespace geglu_cuda {

constexpr float kSqrtHalf = 0.70710678118654752440f;     // 1/sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;   // 1/sqrt(2 pi)
constexpr float kSqrt2OverPi = 0.79788456080286535588f;  // sqrt(2/pi)
constexpr float kKappa = 0.044715f;

// Phi(x) = 0.5 erfc(-x/sqrt(2)): erfc keeps relative accuracy as Phi -> 0.
__device__ __forceinline__ float normal_cdf(float x) { return 0.5f * erfcf(-x * kSqrtHalf); }

// 0.5 (1 + tanh(u)) = sigmoid(2u) and tanh'(u)/4 = s (1 - s) = e / (1 + e)^2 with
// e = exp(-|2u|) <= 1: no cancellation for either sign of u, and no overflow.
struct SigmoidParts {
  float s;             // sigmoid(2u)
  float s_one_minus_s; // s (1 - s)
};

__device__ __forceinline__ SigmoidParts sigmoid_of_twice(float u) {
  const float e = expf(-2.0f * fabsf(u));
  const float r = 1.0f / (1.0f + e);
  const float er = e * r;
  return {u >= 0.0f ? r : er, er * r};
}

template <bool kTanh>
__device__ __forceinline__ float gelu(float x) {
  if constexpr (kTanh) {
    const float u = kSqrt2OverPi * fmaf(kKappa * x, x * x, x);
    return x * sigmoid_of_twice(u).s;
  } else {
    return x * normal_cdf(x);
  }
}

// gelu(x) and d gelu / dx together (they share the expensive transcendental).
template <bool kTanh>
__device__ __forceinline__ void gelu_and_derivative(float x, float &value, float &derivative) {
  if constexpr (kTanh) {
    const float x2 = x * x;
    const float u = kSqrt2OverPi * fmaf(kKappa * x, x2, x);
    const SigmoidParts sp = sigmoid_of_twice(u);
    // d/dx [x s(2u)] = s + x * 2 s (1 - s) * du/dx,  du/dx = sqrt(2/pi) (1 + 3 kappa x^2)
    const float du_dx = kSqrt2OverPi * fmaf(3.0f * kKappa, x2, 1.0f);
    value = x * sp.s;
    derivative = fmaf(2.0f * x * sp.s_one_minus_s, du_dx, sp.s);
  } else {
    const float cdf = normal_cdf(x);
    const float pdf = kInvSqrt2Pi * expf(-0.5f * x * x);
    value = x * cdf;
    derivative = fmaf(x, pdf, cdf);  // Phi(x) + x phi(x)
  }
}

}  // namespace geglu_cuda
