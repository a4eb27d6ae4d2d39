#pragma once
// GELU and its derivative in float32, for both forms of torch.nn.functional.gelu:
//   exact:  gelu(x) = x Phi(x) = 0.5 x (1 + erf(x / sqrt 2))
//   tanh:   gelu(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
//
// Two sets: `gelu_eager` (at the end) is eager PyTorch's own CUDA formula, bit for bit,
// for the activation kernels (gelu, gelu_and_mul, geglu forward: the contract of
// kernels-community/activation). The fast forms below serve the fused GEMM epilogues
// (`gelu`) and the backward (`gelu_and_derivative`), which promise accuracy, not bits.
//
// These kernels run at memory bandwidth only if the math stays cheap: at 4 TB/s an
// H100/H200 SM has ~50 instruction slots per bf16 element of geglu, fewer for the
// backward. So:
// - tanh form: 0.5 (1 + tanh(u)) = sigmoid(2u), from one exp2 and one reciprocal
//   (two MUFU ops) instead of tanhf's longer sequence. Written with e = exp(-|2u|) it
//   neither overflows nor cancels: relative error ~1e-7 for |x| < 3, and in the
//   negative tail (where `1 + tanhf(u)` loses every digit) only what rounding the
//   argument of exp costs any float32 evaluation, ~|2u| * 2e-7 (1e-5 at x = -9).
// - exact form: Phi(x) = sigmoid(g(x)), g the log-odds of the normal CDF (odd, ~x^2/2
//   in the tails), with g(x) log2(e) = x q(min(x^2, 36)) and q a degree-6 polynomial
//   (normal_cdf_log2_odds). That is 8 FMA-pipe ops and the same two MUFU ops as the tanh
//   form, with no branch: CUDA's erff selects between two polynomials and branches
//   around an ex2, which in a GEMM epilogue unrolled over 64+ elements per thread
//   serialized the elements and left the bias + exact-GELU GEMM ~25% slower than the
//   tanh one (docs/DESIGN.md, "The exact GELU in the epilogues"). Accuracy (float32,
//   tools/fit_normal_cdf.py): |Phi error| <= 5e-8 everywhere, gelu within 4.9e-7
//   absolute (the rounding of its own float32 result at |x| ~ 9), relative 1.5e-5 for
//   x > -3 and 5e-4 for x > -4: what 0.5 x (1 + erff(x / sqrt 2)) gives (4.5e-7,
//   1.1e-5, 4.7e-4), and better below -4, where 1 + erff cancels and the sigmoid does
//   not. Beyond |x| = 6 the clamp keeps g linear: Phi(-7) = 1e-12 becomes 4e-11.
// exp2f on a pre-scaled argument replaces expf: the argument is rounded once either
// way, and that rounding, not the exp, bounds the accuracy for large arguments.

namespace geglu_cuda {

constexpr float kInvSqrt2Pi = 0.39894228040143267794f;   // 1/sqrt(2 pi)
constexpr float kSqrt2OverPi = 0.79788456080286535588f;  // sqrt(2/pi)
constexpr float kKappa = 0.044715f;
// |x| beyond which the tanh GELU and its slope are 0 and 0 (x < 0) or x and 1 (x > 0)
// to float32's resolution: at x = -10 the slope is -2.5e-36, at x = 10 it is 1 + 2.5e-36.
constexpr float kTanhSaturation = 10.0f;
// x below which the exact GELU and its slope are 0 in float32 (|x phi(x)| < 2^-149 from
// x = -15); the sigmoid fit of Phi keeps ~1e-35 there, which the backward sets to 0.
constexpr float kErfSaturation = 15.0f;
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

// log2(Phi(x) / (1 - Phi(x))) for the standard normal CDF Phi, the argument of
// sigmoid_log2 for the exact GELU. The polynomial in s = x^2 is a weighted minimax fit
// on [0, 36] (tools/fit_normal_cdf.py); its leading term is 2 log2(e) / sqrt(2 pi).
__device__ __forceinline__ float normal_cdf_log2_odds(float x) {
  const float s = fminf(x * x, 36.0f);  // a NaN x gives s = 36 and returns NaN below
  float q = 5.067261277e-09f;
  q = fmaf(q, s, -3.816321055e-07f);
  q = fmaf(q, s, 1.143984264e-05f);
  q = fmaf(q, s, -1.595799840e-04f);
  q = fmaf(q, s, -9.404912998e-05f);
  q = fmaf(q, s, 1.048351228e-01f);
  q = fmaf(q, s, 2.302209377e+00f);
  return x * q;
}

template <bool kTanh>
__device__ __forceinline__ float gelu(float x) {
  if constexpr (kTanh) {
    const float a = kTwoULog2E * fmaf(kKappa * x, x * x, x);
    return x * sigmoid_log2(a).s;
  } else {
    return x * sigmoid_log2(normal_cdf_log2_odds(x)).s;
  }
}

// The GEMM epilogues' gelu (GegluEpilogue, Fp8GegluEpilogue): x sigmoid(a) =
// x / (1 + 2^(-a log2 e)), one ex2 and one rcp (both MUFU, ~2 ulp, flushing denormals)
// after a few FMA-pipe ops, a = 2u for the tanh form, the normal CDF's log-odds for the
// exact one. For x < ~-10 the exponential overflows to +inf and x * rcp(inf) = -0, the
// limit; there is no cancellation anywhere. Same math as `gelu` above, other instructions
// (hence other last bits): each kernel keeps the form its results were verified with.
template <bool kTanh>
__device__ __forceinline__ float gelu_ex2_rcp(float x) {
  float na;  // -a log2(e)
  if constexpr (kTanh) {
    constexpr float c0 = -kTwoULog2E;
    constexpr float c1 = -kTwoULog2E * kKappa;
    na = x * fmaf(c1, x * x, c0);
  } else {
    na = -normal_cdf_log2_odds(x);
  }
  float e, r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(na));
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(1.0f + e));
  return x * r;
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
    // Past |x| = 1.8e19, x^2 overflows and the product above is 0 * inf = NaN; the
    // slope is exactly 0 or 1 long before. Comparisons, not a clamp: NaN stays NaN.
    // x - x is +0 for a finite x and NaN at +-inf, where eager and float64 give NaN
    // too (0 * inf): an overflow upstream stays visible.
    if (x < -kTanhSaturation) derivative = x - x;
    if (x > kTanhSaturation) derivative = 1.0f + (x - x);
  } else {
    const float cdf = sigmoid_log2(normal_cdf_log2_odds(x)).s;
    const float pdf = kInvSqrt2Pi * exp2f(-0.5f * kLog2E * x2);  // phi(x) = e^(-x^2/2) / sqrt(2 pi)
    value = x * cdf;
    derivative = fmaf(x, pdf, cdf);  // Phi(x) + x phi(x)
    if (x < -kErfSaturation) {  // -0 and +0 as eager gives them; NaN at -inf (0 * inf) as eager does
      value = x * 0.0f;
      derivative = x - x;
    }
  }
}

// ----------------------------------------------------------------------------- eager

// F.gelu as eager PyTorch computes it on CUDA: ATen's GeluCUDAKernelImpl
// (aten/src/ATen/native/cuda/ActivationGeluKernel.cu), in float ("opmath") for every
// storage type, operation for operation:
//   exact:  x * 0.5 * (1 + erf(x * M_SQRT1_2))
//   tanh:   0.5 * x * (1 + tanh(kBeta * (x + kKappa * (x * x * x)))),
//           kBeta = M_SQRT2 * M_2_SQRTPI * 0.5, kKappa = 0.044715
// Its constants are double expressions rounded to float once (as ATen's constexpr
// opmath_t initializers are); the literals are glibc's M_SQRT2, M_2_SQRTPI, M_SQRT1_2.
// erff and tanhf are CUDA's full-precision functions (no --use_fast_math in this build,
// nor in ATen's), and denormals are kept (no -ftz) on both sides. With nvcc's default
// --fmad=true, `kKappa * x_cube + x` contracts into one FMA here as in ATen's build;
// nothing else does (no other product feeds a sum outside erff / tanhf). The
// expressions keep ATen's shape and order: reassociating any of them changes the
// roundings, hence the bits. (Checked with nvcc 13.0: ATen's lambda bodies and these
// compile to the same PTX for sm_90a.) The result is rounded to the storage type by
// the caller, as ATen's kernel returns scalar_t.
// Cost: erff / tanhf are ~20-30 instructions with a branch; the elementwise kernels
// stay memory bound (one transcendental per element), unlike the GEMM epilogues.
template <bool kTanh>
__device__ __forceinline__ float gelu_eager(float x) {
  constexpr double kSqrt2 = 1.41421356237309504880;          // M_SQRT2
  constexpr double kTwoOverSqrtPi = 1.12837916709551257390;  // M_2_SQRTPI
  constexpr double kSqrtHalf = 0.70710678118654752440;       // M_SQRT1_2
  if constexpr (kTanh) {
    constexpr float kBeta = static_cast<float>(kSqrt2 * kTwoOverSqrtPi * 0.5);
    constexpr float kKappaEager = static_cast<float>(0.044715);
    const float x_cube = x * x * x;
    const float inner = kBeta * (x + kKappaEager * x_cube);
    return 0.5f * x * (1.0f + tanhf(inner));
  } else {
    constexpr float kAlpha = static_cast<float>(kSqrtHalf);
    return x * 0.5f * (1.0f + erff(x * kAlpha));
  }
}

}  // namespace geglu_cuda
