#pragma once
// GELU and its derivative in float32, for both forms of torch.nn.functional.gelu:
//   exact:  gelu(x) = x Phi(x) = 0.5 x (1 + erf(x / sqrt 2))
//   tanh:   gelu(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
//
// These kernels run at memory bandwidth only if the math stays cheap: at 4 TB/s an
// H100/H200 SM has ~50 instruction slots per bf16 element of geglu, fewer for the
// backward. So:
// - tanh form: 0.5 (1 + tanh(u)) = sigmoid(2u), from one exp2 and one reciprocal
//   (two MUFU ops) instead of tanhf's longer sequence. Written with e = exp(-|2u|) it
//   neither overflows nor cancels: relative error ~1e-7 for |x| < 3, and in the
//   negative tail (where `1 + tanhf(u)` loses every digit) only what rounding the
//   argument of exp costs any float32 evaluation, ~|2u| * 2e-7 (1e-5 at x = -9).
// - exact form: erff, as PyTorch computes it (erfcf would keep relative accuracy in
//   the far negative tail too, but costs ~2x erff and makes the kernel compute bound).
//   There 1 + erf cancels: for x < -3 the error is absolute, ~1e-7 |x|.
// exp2f on a pre-scaled argument replaces expf: the argument is rounded once either
// way, and that rounding, not the exp, bounds the accuracy for large arguments.

namespace geglu_cuda {

constexpr float kSqrtHalf = 0.70710678118654752440f;     // 1/sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;   // 1/sqrt(2 pi)
constexpr float kSqrt2OverPi = 0.79788456080286535588f;  // sqrt(2/pi)
constexpr float kKappa = 0.044715f;
constexpr float kLog2E = 1.44269504088896340736f;
// 2u log2(e) = kTwoULog2E * (x + kappa x^3): the exponent of sigmoid(2u) in base 2.
// Folded in double and rounded once: in the tail its relative error is multiplied
// by |2u log2 e| (up to ~126) in the result.
constexpr float kTwoULog2E = static_cast<float>(2.0 * 0.79788456080286535588 * 1.44269504088896340736);

// sigmoid(2u) and s (1 - s) = tanh'(u) / 4, from a = 2u log2(e).
// With e = 2^-|a| in (0, 1] and r = 1 / (1 + e):  s = r for a >= 0, e r otherwise,
// and s (1 - s) = e r^2 for either sign. 1 + e is in [1, 2], where the fast
// reciprocal (__fdividef) is accurate to 2 ulp.
struct SigmoidParts {
  float s;
  float s_one_minus_s;
};

__device__ __forceinline__ SigmoidParts sigmoid_log2(float a) {
  const float e = exp2f(-fabsf(a));
  const float r = __fdividef(1.0f, 1.0f + e);
  const float er = e * r;
  return {a >= 0.0f ? r : er, er * r};
}

template <bool kTanh>
__device__ __forceinline__ float gelu(float x) {
  if constexpr (kTanh) {
    const float a = kTwoULog2E * fmaf(kKappa * x, x * x, x);
    return x * sigmoid_log2(a).s;
  } else {
    return 0.5f * x * (1.0f + erff(x * kSqrtHalf));
  }
}

// gelu(x) and d gelu / dx together (they share the expensive transcendental).
template <bool kTanh>
__device__ __forceinline__ void gelu_and_derivative(float x, float &value, float &derivative) {
  const float x2 = x * x;
  if constexpr (kTanh) {
    const SigmoidParts sp = sigmoid_log2(kTwoULog2E * fmaf(kKappa * x, x2, x));
    // d/dx [x s] = s + x * 2 s (1 - s) * du/dx,  du/dx = sqrt(2/pi) (1 + 3 kappa x^2)
    const float du_dx = kSqrt2OverPi * fmaf(3.0f * kKappa, x2, 1.0f);
    value = x * sp.s;
    derivative = fmaf(2.0f * x * sp.s_one_minus_s, du_dx, sp.s);
  } else {
    const float cdf = 0.5f * (1.0f + erff(x * kSqrtHalf));
    const float pdf = kInvSqrt2Pi * exp2f(-0.5f * kLog2E * x2);  // phi(x) = e^(-x^2/2) / sqrt(2 pi)
    value = x * cdf;
    derivative = fmaf(x, pdf, cdf);  // Phi(x) + x phi(x)
  }
}

}  // namespace geglu_cuda
