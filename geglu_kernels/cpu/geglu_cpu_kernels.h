#pragma once

// The GeGLU row kernels, written once over ATen's at::vec::Vectorized and compiled
// once per instruction set. The including file defines CPU_CAPABILITY (ATen's inline
// namespace for Vectorized: DEFAULT, AVX2 or AVX512) and, for AVX2 / AVX-512,
// CPU_CAPABILITY_AVX2 / CPU_CAPABILITY_AVX512 before any include, as ATen's own
// per-capability kernel files are compiled. Everything here has internal linkage, so
// the copies in different files never meet at link time.
//
// Vectorized is header-only: its code is compiled into this module and calls nothing
// in libtorch, so the module stays within torch's stable ABI; the threads come from
// torch::stable::parallel_for (at::parallel_for behind the stable C shim).
//
// Do not define static data with a dynamic initializer here: it would run at load
// time with the including file's instruction set, on every CPU.

// The stable-ABI headers first, with the build's TORCH_TARGET_VERSION (the stable API
// of torch 2.10 and nothing newer).
#include <torch/csrc/stable/ops.h>

// ATen's Vectorized is not part of the stable ABI, and its headers refuse to compile
// where TORCH_TARGET_VERSION is defined. What this file uses of it is inline code
// (arithmetic, loads/stores, bf16/fp16 conversions, the polynomial exp_u20) that is
// compiled into this module and calls nothing in libtorch: the build's ABI check
// (tools/torch_stable_abi.py) verifies that the module references no libtorch symbol
// outside the stable C shims. So the macro is lifted around these includes only.
#if defined(TORCH_TARGET_VERSION)
#pragma push_macro("TORCH_TARGET_VERSION")
#undef TORCH_TARGET_VERSION
#define GEGLU_CPU_RESTORE_TARGET_VERSION
#endif
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#if defined(GEGLU_CPU_RESTORE_TARGET_VERSION)
#pragma pop_macro("TORCH_TARGET_VERSION")
#undef GEGLU_CPU_RESTORE_TARGET_VERSION
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <tuple>
#include <type_traits>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "kernel_table.h"

#ifndef CPU_CAPABILITY
#error "define CPU_CAPABILITY (DEFAULT, AVX2 or AVX512) before including geglu_cpu_kernels.h"
#endif

#define GEGLU_CPU_STR_(x) #x
#define GEGLU_CPU_STR(x) GEGLU_CPU_STR_(x)

namespace geglu_cpu {
namespace {

using fVec = at::vec::Vectorized<float>;

// ---------------------------------------------------------------- float32 math
// The backward's formulas (the forward's, eager's own, are further down): one set for
// the vector body (V = fVec) and the scalar tail (V = float), written with the small
// helpers below.

inline float fmadd_(float a, float b, float c) { return a * b + c; }
inline float abs_(float x) { return std::fabs(x); }
inline float exp_(float x) { return std::exp(x); }
inline float min_(float a, float b) { return std::fmin(a, b); }
inline float where_less(float a, float b, float if_less, float otherwise) {
  return a < b ? if_less : otherwise;
}

inline fVec fmadd_(const fVec &a, const fVec &b, const fVec &c) {
  return at::vec::fmadd(a, b, c);
}
inline fVec abs_(const fVec &x) { return x.abs(); }
// ATen's inline polynomial exp ("ULP=20", about 2e-6 relative): no call into Sleef.
inline fVec exp_(const fVec &x) { return x.exp_u20(); }
inline fVec min_(const fVec &a, const fVec &b) { return at::vec::minimum(a, b); }
inline fVec where_less(const fVec &a, const fVec &b, const fVec &if_less,
                       const fVec &otherwise) {
  return fVec::blendv(otherwise, if_less, a < b);
}

// Horner: c[0] + c[1] y + ... + c[N-1] y^(N-1).
template <typename V, size_t N> inline V polynomial(const V &y, const float (&c)[N]) {
  V acc(c[N - 1]);
  for (size_t i = N - 1; i-- > 0;) {
    acc = fmadd_(acc, y, V(c[i]));
  }
  return acc;
}

constexpr float kSqrtHalf = 0.70710678118654752440f;   // 1 / sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143267794f; // 1 / sqrt(2 pi)
constexpr float kBeta = 0.79788456080286535588f;       // sqrt(2 / pi)
constexpr float kKappa = 0.044715f;
// |x| beyond which the tanh GELU and its slope are 0 and 0 (x < 0) or x and 1 (x > 0)
// to float32's resolution: at x = -10 the slope is -2.5e-36, at x = 10 it is 1 + 2.5e-36.
constexpr float kTanhSaturation = 10.0f;

// Phi(x), the standard normal CDF, together with gauss = exp(-x^2 / 2), for the
// backward pass, which needs phi(x) = gauss / sqrt(2 pi) anyway. erfc(a), a >= 0, is
// Abramowitz & Stegun 7.1.26: t (a1 + a2 t + ... + a5 t^4) exp(-a^2), t = 1 / (1 + p a),
// |error| < 1.5e-7 (the formula of ATen's Vectorized::erf, here with an inline exp).
// Computing the tail Phi(-|x|) = erfc(|x| / sqrt 2) / 2 directly, and 1 - tail for
// x >= 0, avoids the cancellation in 1 + erf(x) for negative x.
template <typename V> inline V normal_cdf(const V &x, V &gauss) {
  static constexpr float kHalfA[] = {0.5f * 0.254829592f, 0.5f * -0.284496736f,
                                     0.5f * 1.421413741f, 0.5f * -1.453152027f,
                                     0.5f * 1.061405429f};
  const V t = V(1.0f) / fmadd_(V(0.3275911f * kSqrtHalf), abs_(x), V(1.0f));
  gauss = exp_(V(-0.5f) * x * x);
  const V tail = polynomial(t, kHalfA) * t * gauss; // Phi(-|x|)
  return where_less(x, V(0.0f), tail, V(1.0f) - tail);
}

// The tanh form is evaluated as a logistic, using 1 + tanh(z) = 2 / (1 + exp(-2z)):
//   x/2 * (1 + tanh(z)) = x / (1 + exp(-2z)),   z = beta * (x + kappa x^3).
// One exp and one division are cheaper than a vector tanh, and the result has no
// cancellation for negative x.
template <typename V> inline V minus_two_z(const V &x) {
  return x * fmadd_(V(-2.0f * kBeta * kKappa), x * x, V(-2.0f * kBeta));
}

// gelu(x) and its exact derivative, which the backward needs together.
template <Gelu kind, typename V>
inline void gelu_with_derivative(const V &x, V &value, V &slope) {
  if constexpr (kind == Gelu::kErf) {
    // d/dx [x Phi(x)] = Phi(x) + x phi(x),  phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
    V gauss;
    const V cdf = normal_cdf(x, gauss);
    value = x * cdf;
    slope = fmadd_(x * gauss, V(kInvSqrt2Pi), cdf);
  } else {
    // With s = 1 / (1 + e), e = exp(-2z) (so s = (1 + tanh z) / 2 and 1 - s = e s):
    // d/dx [x s] = s + x s (1 - s) * 2 dz/dx,  dz/dx = beta (1 + 3 kappa x^2).
    // Clamping -2z keeps e finite, so e * s never becomes inf * 0; at the clamp
    // s < 2e-35, already 0 for any output dtype.
    const V e = exp_(min_(minus_two_z(x), V(80.0f)));
    const V s = V(1.0f) / (V(1.0f) + e);
    const V two_dz = fmadd_(V(6.0f * kBeta * kKappa), x * x, V(2.0f * kBeta));
    value = x * s;
    slope = fmadd_(x * (s * (e * s)), two_dz, s);
    // Beyond |x| = kTanhSaturation the float32 results are exactly gelu = -0, slope = 0
    // (x < 0) and slope = 1 (x > 0). The formula cannot give them: the clamped s times
    // a huge x is not 0 (gelu(-3e38) would be -5e3), and x^2 overflows near 1.8e19
    // (0 * inf). Selects, not a clamp of x, so a NaN x stays NaN; and the limits are
    // written x * 0 and x - x, which are -0 / +0 for a finite x but NaN at +-inf, where
    // eager and float64 give NaN too (0 * inf): an overflow upstream stays visible.
    const V lo(-kTanhSaturation), hi(kTanhSaturation), one(1.0f);
    const V zero_or_nan = x - x;
    value = where_less(x, lo, x * V(0.0f), value);
    slope = where_less(x, lo, zero_or_nan, where_less(hi, x, one + zero_or_nan, slope));
  }
}

// ---------------------------------------------------------------- storage <-> float32
// Every step handles 2 * fVec::size() elements: one Vectorized<T> of a 16-bit type,
// or two float vectors.
constexpr int64_t kStep = 2 * fVec::size();

// bfloat16 is the upper half of a float32, so on AVX2 / AVX-512 a vector of 2N bfloat16
// converts without any lane shuffle by reading it as N 32-bit lanes: a lane's high half
// is already the float32 of its odd element, and shifting the lane left by 16 gives
// that of its even element. The row kernels are elementwise, so they compute on these
// de-interleaved (even, odd) halves and store_float interleaves them back the same
// way; float32 and float16 keep the plain element order.
#if defined(CPU_CAPABILITY_AVX2)
using iReg = __m256i;
inline iReg iload(const void *p) { return _mm256_loadu_si256(static_cast<const iReg *>(p)); }
inline void istore(void *p, iReg v) { _mm256_storeu_si256(static_cast<iReg *>(p), v); }
inline iReg ibroadcast(int32_t x) { return _mm256_set1_epi32(x); }
inline iReg ishl16(iReg v) { return _mm256_slli_epi32(v, 16); }
inline iReg ishr16(iReg v) { return _mm256_srli_epi32(v, 16); }
inline iReg iand(iReg a, iReg b) { return _mm256_and_si256(a, b); }
inline iReg ior(iReg a, iReg b) { return _mm256_or_si256(a, b); }
inline iReg iadd(iReg a, iReg b) { return _mm256_add_epi32(a, b); }
inline fVec as_float(iReg v) { return _mm256_castsi256_ps(v); }
inline iReg as_int(const fVec &v) { return _mm256_castps_si256(v); }
// Lanes where x is NaN take `nan`, the others keep v.
inline iReg nan_to(const fVec &x, iReg v, iReg nan) {
  return _mm256_blendv_epi8(v, nan, _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)));
}
#define GEGLU_CPU_BF16_LANES 1
#elif defined(CPU_CAPABILITY_AVX512)
using iReg = __m512i;
inline iReg iload(const void *p) { return _mm512_loadu_si512(p); }
inline void istore(void *p, iReg v) { _mm512_storeu_si512(p, v); }
inline iReg ibroadcast(int32_t x) { return _mm512_set1_epi32(x); }
inline iReg ishl16(iReg v) { return _mm512_slli_epi32(v, 16); }
inline iReg ishr16(iReg v) { return _mm512_srli_epi32(v, 16); }
inline iReg iand(iReg a, iReg b) { return _mm512_and_si512(a, b); }
inline iReg ior(iReg a, iReg b) { return _mm512_or_si512(a, b); }
inline iReg iadd(iReg a, iReg b) { return _mm512_add_epi32(a, b); }
inline fVec as_float(iReg v) { return _mm512_castsi512_ps(v); }
inline iReg as_int(const fVec &v) { return _mm512_castps_si512(v); }
inline iReg nan_to(const fVec &x, iReg v, iReg nan) {
  return _mm512_mask_mov_epi32(v, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), nan);
}
#define GEGLU_CPU_BF16_LANES 1
#endif

#ifdef GEGLU_CPU_BF16_LANES
static_assert(sizeof(iReg) == sizeof(fVec) && sizeof(iReg) == kStep * sizeof(c10::BFloat16));
// x rounded to bfloat16 (to nearest, ties to even, as c10::BFloat16 rounds), in the
// high 16 bits of each lane; NaN becomes c10's quiet NaN 0x7fc0. The low bits are left
// over and must be masked or shifted out.
inline iReg round_to_bf16_high(const fVec &x) {
  const iReg bits = as_int(x);
  const iReg odd = iand(ishr16(bits), ibroadcast(1));
  const iReg rounded = iadd(bits, iadd(odd, ibroadcast(0x7fff)));
  return nan_to(x, rounded, ibroadcast(0x7fc00000));
}
#endif

template <typename T> inline void load_float(const T *p, fVec &a, fVec &b) {
  if constexpr (std::is_same_v<T, float>) {
    a = fVec::loadu(p);
    b = fVec::loadu(p + fVec::size());
#ifdef GEGLU_CPU_BF16_LANES
  } else if constexpr (std::is_same_v<T, c10::BFloat16>) {
    const iReg v = iload(p);
    a = as_float(ishl16(v));                                     // even elements
    b = as_float(iand(v, ibroadcast(static_cast<int32_t>(0xffff0000u)))); // odd elements
#endif
  } else {
    static_assert(at::vec::Vectorized<T>::size() == kStep);
    std::tie(a, b) = at::vec::convert_to_float<T>(at::vec::Vectorized<T>::loadu(p));
  }
}

template <typename T> inline void store_float(T *p, const fVec &a, const fVec &b) {
  if constexpr (std::is_same_v<T, float>) {
    a.store(p);
    b.store(p + fVec::size());
#ifdef GEGLU_CPU_BF16_LANES
  } else if constexpr (std::is_same_v<T, c10::BFloat16>) {
    istore(p, ior(ishr16(round_to_bf16_high(a)),
                  iand(round_to_bf16_high(b), ibroadcast(static_cast<int32_t>(0xffff0000u)))));
#endif
  } else {
    at::vec::convert_from_float<T>(a, b).store(p);
  }
}

// ---------------------------------------------------------------- the forward: eager's GELU
// The forward kernels compute F.gelu(x, approximate) as ATen's CPU kernel does
// (ATen/native/cpu/Gelu.h: vectorized_gelu / vectorized_gelu_approximated_with_tanh for
// the vector body, scalar_gelu / scalar_gelu_approximated_with_tanh for the tail), in
// float for every storage type, operation for operation:
//   exact:  x * 0.5 * (1 + erf(x * M_SQRT1_2))
//   tanh:   0.5 * x * (1 + tanh(kBeta * (x + kKappa * x^3))),
//           kBeta = M_SQRT2 * M_2_SQRTPI * 0.5, kKappa = 0.044715
// and then round like eager: gelu to the storage type, the product with up in float,
// rounded again (forward_row). ATen's AVX2 / AVX-512 kernels (GCC, FMA enabled)
// contract x + kKappa * x^3 into one FMA; their erf and tanh are Vectorized<float>'s:
//  - erf: Abramowitz & Stegun 7.1.26 in float (vec256_float.h / vec512_float.h),
//    reproduced below operation for operation, around exp(-z^2) from SLEEF's expf_u10;
//  - tanh: SLEEF's tanhf_u10, exactly +-1 beyond |y| = 8.6643400 (measured).
// SLEEF lives in libtorch, outside the stable ABI this module keeps to, so exp and tanh
// are computed here, in float32 to about one ulp, as SLEEF's are: they agree with
// SLEEF's for most arguments but not all. So in float32 some results differ from
// eager's by an ulp, more where 1 + erf or 1 + tanh cancels (x < -1.5: there an ulp of
// tanh is |x| * 2^-25 absolute); after rounding to bfloat16 / float16 next to none do
// (tests/kernels/test_activation_matches_eager.py states and checks the bounds).
// Eager itself is not one function on CPU: its scalar tail (std::erf, std::tanh)
// differs from its vector body by as much in the negative tail, and a contiguous
// float32 (AVX-512: bfloat16 too) input takes oneDNN's exact GELU, another formula.
// The DEFAULT build (no AVX2) maps std::erf / std::tanh over the lanes, as ATen's
// DEFAULT Vectorized does.

constexpr double kM_SQRT2 = 1.41421356237309504880;      // glibc's M_SQRT2
constexpr double kM_2_SQRTPI = 1.12837916709551257390;   // M_2_SQRTPI
constexpr double kM_SQRT1_2 = 0.70710678118654752440;    // M_SQRT1_2
constexpr float kEagerAlpha = static_cast<float>(kM_SQRT1_2);
constexpr float kEagerBeta = static_cast<float>(kM_SQRT2 * kM_2_SQRTPI * 0.5);
constexpr float kEagerKappa = static_cast<float>(0.044715);

#ifdef GEGLU_CPU_BF16_LANES // AVX2 / AVX-512
inline iReg ishl23(iReg v) {
#if defined(CPU_CAPABILITY_AVX2)
  return _mm256_slli_epi32(v, 23);
#else
  return _mm512_slli_epi32(v, 23);
#endif
}

// e^y for y <= 0, within ~1 ulp, in float32 as SLEEF's expf_u10 (a correctly rounded
// exp, evaluated in double, matched SLEEF's less often: it differs from it for ~9% of
// arguments, at 2-3x the cost). y = n ln2 + r with |r| <= ln2 / 2 (Cody-Waite, ln2 in
// two parts), e^r by its Taylor series to r^7 (truncation 5e-9 relative), times 2^n
// built in the exponent bits. y is clamped at -87 to keep 2^n normal: below, e^y <
// 2^-125 is only ever added to 1 here.
inline fVec exp_eager(const fVec &y_in) {
  constexpr float kLog2E = 1.44269504088896341f;
  constexpr float kShift = 12582912.0f; // 1.5 * 2^23: adding it rounds to an integer
  constexpr float kLn2Hi = 0.693359375f; // ln 2 = kLn2Hi + kLn2Lo, kLn2Hi exact in 9 bits
  constexpr float kLn2Lo = -2.12194440e-4f;
  const fVec y = at::vec::maximum(y_in, fVec(-87.0f)); // keeps NaN
  const fVec kd = at::vec::fmadd(y, fVec(kLog2E), fVec(kShift));
  const fVec n = kd - fVec(kShift);
  fVec r = at::vec::fmadd(n, fVec(-kLn2Hi), y);
  r = at::vec::fmadd(n, fVec(-kLn2Lo), r);
  fVec q(1.0f / 5040);
  q = at::vec::fmadd(q, r, fVec(1.0f / 720));
  q = at::vec::fmadd(q, r, fVec(1.0f / 120));
  q = at::vec::fmadd(q, r, fVec(1.0f / 24));
  q = at::vec::fmadd(q, r, fVec(1.0f / 6));
  q = at::vec::fmadd(q, r, fVec(0.5f));
  // 1 + (r + r^2 q), the last sum rounded once, as SLEEF sums its expf: the results then
  // equal SLEEF's for all but ~0.7% of arguments (a plain Horner form to 1: ~9%).
  const fVec p = fVec(1.0f) + at::vec::fmadd(r * r, q, r);
  // kd's low mantissa bits hold n: shifted into the exponent field, plus the bias.
  const fVec scale = as_float(iadd(ishl23(as_int(kd)), ibroadcast(127 << 23)));
  return p * scale;
}

// tanh as eager's vector body gets it from SLEEF's tanhf_u10, to ~1 ulp: exactly +-1
// beyond |y| = 8.6643400 (where SLEEF switches, measured; the correctly rounded tanh
// reaches 1 only at 9.0109), else for |y| >= 0.625 1 - 2e / (1 + e), e = e^(-2|y|),
// signed; below, y + y^3 P(y^2), P a degree-5 fit of (tanh(y) - y) / y^3 on
// [0, 0.625] (0.72 ulp in float32 arithmetic).
inline fVec tanh_eager(const fVec &y) {
  const fVec a = y.abs();
  const fVec sign = y & fVec(-0.0f);
  const fVec e = exp_eager(fVec(-2.0f) * a);
  const fVec large = (fVec(1.0f) - fVec(2.0f) * e / (fVec(1.0f) + e)) ^ sign;
  const fVec y2 = y * y;
  fVec q(0.002142799785360694f);
  q = at::vec::fmadd(q, y2, fVec(-0.008177092298865318f));
  q = at::vec::fmadd(q, y2, fVec(0.021700501441955566f));
  q = at::vec::fmadd(q, y2, fVec(-0.05394670367240906f));
  q = at::vec::fmadd(q, y2, fVec(0.1333320587873459f));
  q = at::vec::fmadd(q, y2, fVec(-0.3333333134651184f));
  const fVec small = at::vec::fmadd(y * y2, q, y);
  const fVec t = fVec::blendv(large, small, a < fVec(0.625f));
  return fVec::blendv(t, fVec(1.0f) ^ sign, a > fVec(8.66434001922607421875f));
}

// ATen's Vectorized<float>::erf on AVX2 / AVX-512, operation for operation (A&S 7.1.26:
// erf(z) = sign(z) (1 - r(t) t e^(-z^2)), t = 1 / (1 + p |z|), |error| <= 1.5e-7).
inline fVec erf_eager(const fVec &z) {
  const fVec sign = z & fVec(-0.0f);
  const fVec t = fVec(1.0f) / at::vec::fmadd(fVec(0.3275911f), z.abs(), fVec(1.0f));
  fVec r = at::vec::fmadd(fVec(1.061405429f), t, fVec(-1.453152027f));
  r = at::vec::fmadd(r, t, fVec(1.421413741f));
  r = at::vec::fmadd(r, t, fVec(-0.284496736f));
  r = at::vec::fmadd(r, t, fVec(0.254829592f));
  const fVec e = exp_eager((z * z).neg());
  const fVec one_minus = at::vec::fmadd(e.neg() * t, r, fVec(1.0f)); // 1 - r t e^(-z^2)
  return one_minus ^ sign;
}

// x + kKappa * x^3 as ATen's AVX2 / AVX-512 GELU gets it from GCC: one FMA (the scalar
// tail's too: ATen's scalar GELU is compiled with FMA enabled in the same files).
inline fVec cubic_eager(const fVec &x, const fVec &x_cube) {
  return at::vec::fmadd(fVec(kEagerKappa), x_cube, x);
}
inline float cubic_eager(float x, float x_cube) { return std::fma(kEagerKappa, x_cube, x); }
#else
// DEFAULT: ATen's Vectorized<float> maps std::erf / std::tanh over the lanes.
template <typename F> inline fVec map_lanes(const fVec &x, const F &f) {
  __at_align__ float v[fVec::size()];
  x.store(v);
  for (int i = 0; i < fVec::size(); ++i) {
    v[i] = f(v[i]);
  }
  return fVec::loadu(v);
}
inline fVec erf_eager(const fVec &z) { return map_lanes(z, [](float v) { return std::erf(v); }); }
inline fVec tanh_eager(const fVec &y) { return map_lanes(y, [](float v) { return std::tanh(v); }); }
inline fVec cubic_eager(const fVec &x, const fVec &x_cube) { return x + fVec(kEagerKappa) * x_cube; }
inline float cubic_eager(float x, float x_cube) { return x + kEagerKappa * x_cube; }
#endif
// The scalar tail: ATen's scalar path calls std::erf / std::tanh.
inline float erf_eager(float z) { return std::erf(z); }
inline float tanh_eager(float y) { return std::tanh(y); }

template <Gelu kind, typename V> inline V gelu_eager(const V &x) {
  if constexpr (kind == Gelu::kErf) {
    return x * V(0.5f) * (V(1.0f) + erf_eager(x * V(kEagerAlpha)));
  } else {
    const V x_cube = x * x * x;
    const V inner = V(kEagerBeta) * cubic_eager(x, x_cube);
    return V(0.5f) * x * (V(1.0f) + tanh_eager(inner));
  }
}

// a, b rounded to the storage type T and widened back: what a T tensor holds after
// storing them (per lane; identity for float).
template <typename T> inline void round_to(fVec &a, fVec &b) {
  if constexpr (std::is_same_v<T, float>) {
    return;
#ifdef GEGLU_CPU_BF16_LANES
  } else if constexpr (std::is_same_v<T, c10::BFloat16>) {
    const iReg high = ibroadcast(static_cast<int32_t>(0xffff0000u));
    a = as_float(iand(round_to_bf16_high(a), high));
    b = as_float(iand(round_to_bf16_high(b), high));
#endif
  } else {
    std::tie(a, b) = at::vec::convert_to_float<T>(at::vec::convert_from_float<T>(a, b));
  }
}

// ---------------------------------------------------------------- row kernels
// Each processes n consecutive elements of one row: vector steps, then a scalar tail
// for the n % kStep elements left (the same formulas in scalar float32).

// out = gelu(gate) * up   (kGated)   or   out = gelu(gate)   (!kGated; up unused),
// rounded as eager's F.gelu(gate) * up: gelu to T, then the product, to T again.
template <typename T, Gelu kind, bool kGated>
void forward_row(T *out, const T *gate, const T *up, int64_t n) {
  int64_t i = 0;
  for (; i + kStep <= n; i += kStep) {
    fVec g0, g1;
    load_float(gate + i, g0, g1);
    fVec y0 = gelu_eager<kind>(g0), y1 = gelu_eager<kind>(g1);
    if constexpr (kGated) {
      round_to<T>(y0, y1);
      fVec u0, u1;
      load_float(up + i, u0, u1);
      y0 = y0 * u0;
      y1 = y1 * u1;
    }
    store_float(out + i, y0, y1);
  }
  for (; i < n; ++i) {
    const T y = static_cast<T>(gelu_eager<kind>(static_cast<float>(gate[i])));
    if constexpr (kGated) {
      out[i] = static_cast<T>(static_cast<float>(y) * static_cast<float>(up[i]));
    } else {
      out[i] = y;
    }
  }
}

// grad_gate = grad_out * up * gelu'(gate),  grad_up = grad_out * gelu(gate)
template <typename T, Gelu kind>
void backward_row(T *grad_gate, T *grad_up, const T *grad_out, const T *gate, const T *up,
                  int64_t n) {
  int64_t i = 0;
  for (; i + kStep <= n; i += kStep) {
    fVec dy0, dy1, g0, g1, u0, u1, y0, y1, s0, s1;
    load_float(grad_out + i, dy0, dy1);
    load_float(gate + i, g0, g1);
    load_float(up + i, u0, u1);
    gelu_with_derivative<kind>(g0, y0, s0);
    gelu_with_derivative<kind>(g1, y1, s1);
    store_float(grad_gate + i, dy0 * u0 * s0, dy1 * u1 * s1);
    store_float(grad_up + i, dy0 * y0, dy1 * y1);
  }
  for (; i < n; ++i) {
    const float dy = static_cast<float>(grad_out[i]);
    float y, s;
    gelu_with_derivative<kind>(static_cast<float>(gate[i]), y, s);
    grad_gate[i] = static_cast<T>(dy * static_cast<float>(up[i]) * s);
    grad_up[i] = static_cast<T>(dy * y);
  }
}

// ---------------------------------------------------------------- parallel driver

// Work per task at least this many elements (ATen's elementwise grain size).
constexpr int64_t kGrainElements = 32768;
// Rows wider than this are split into segments, so that a few very wide rows still
// spread over every thread. A multiple of every kStep, so only a row's last segment
// has a scalar tail.
constexpr int64_t kSegment = 16384;
static_assert(kSegment % kStep == 0);

// Calls fn(row, begin, end) for column ranges that together cover the matrix once.
template <typename Fn> void for_each_row_segment(Extent e, const Fn &fn) {
  if (e.rows == 0 || e.width == 0) {
    return;
  }
  const int64_t segments = (e.width + kSegment - 1) / kSegment;
  const int64_t segment_width = std::min(e.width, kSegment);
  const int64_t grain = std::max<int64_t>(1, kGrainElements / segment_width);
  torch::stable::parallel_for(0, e.rows * segments, grain, [&](int64_t first, int64_t last) {
    for (int64_t task = first; task < last; ++task) {
      const int64_t row = task / segments;
      const int64_t begin = (task % segments) * kSegment;
      fn(row, begin, std::min(begin + kSegment, e.width));
    }
  });
}

// Outputs are usually fresh allocations (at::empty; glibc maps blocks of 32 MiB and up
// anew each time), whose first write faults once per 4 KiB page. On the 2-core AMD
// EPYC VM where this was measured, filling a fresh 48 MiB tensor took 72 ms that way
// and 24 ms with huge pages, while a [4096, 3072] float32 geglu computes in ~6 ms of
// one core. So, before writing a contiguous output of 4 MiB or more, the kernels
// ask for transparent huge pages on its whole 2 MiB pages (MADV_HUGEPAGE, as torch's
// own THP_MEM_ALLOC_ENABLE=1 does for its large allocations; with the common THP setting
// "madvise" the kernel honours it, with "always" it changes nothing, with "never" it
// is ignored, as is a failure). Pages already present stay as they are. The cost is one
// system call per op call, and the mapping splits at the advised range's edges.
constexpr int64_t kHugePage = int64_t{2} << 20;
inline void advise_huge_pages(const void *data, int64_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (bytes < 2 * kHugePage) {
    return;
  }
  const auto start = reinterpret_cast<uintptr_t>(data);
  const uintptr_t begin = (start + kHugePage - 1) & ~uintptr_t(kHugePage - 1);
  const uintptr_t end = (start + static_cast<uintptr_t>(bytes)) & ~uintptr_t(kHugePage - 1);
  if (end > begin) {
    madvise(reinterpret_cast<void *>(begin), end - begin, MADV_HUGEPAGE);
  }
#endif
}
template <typename T> inline void advise_huge_pages(Rows m, Extent e) {
  if (m.row_stride == e.width) {
    advise_huge_pages(m.data, e.rows * e.width * static_cast<int64_t>(sizeof(T)));
  }
}

template <typename T> inline T *row_ptr(Rows m, int64_t row) {
  return static_cast<T *>(m.data) + row * m.row_stride;
}
template <typename T> inline const T *row_ptr(ConstRows m, int64_t row) {
  return static_cast<const T *>(m.data) + row * m.row_stride;
}

// ---------------------------------------------------------------- dtype dispatch
// The one place where runtime (dtype, approximate) become template arguments:
// fn(T{}, std::integral_constant<Gelu, kind>{}).

template <typename Fn> void dispatch(Dtype dtype, Gelu gelu, const Fn &fn) {
  auto with_gelu = [&](auto storage) {
    if (gelu == Gelu::kErf) {
      fn(storage, std::integral_constant<Gelu, Gelu::kErf>{});
    } else {
      fn(storage, std::integral_constant<Gelu, Gelu::kTanh>{});
    }
  };
  switch (dtype) {
  case Dtype::kFloat32:
    return with_gelu(float{});
  case Dtype::kBFloat16:
    return with_gelu(c10::BFloat16{});
  case Dtype::kFloat16:
    return with_gelu(c10::Half{});
  }
}

void geglu_kernel(Dtype dtype, Gelu gelu, Extent e, Rows out, ConstRows gate, ConstRows up) {
  dispatch(dtype, gelu, [&](auto storage, auto kind) {
    using T = decltype(storage);
    constexpr Gelu K = decltype(kind)::value;
    advise_huge_pages<T>(out, e);
    for_each_row_segment(e, [&](int64_t r, int64_t begin, int64_t end) {
      forward_row<T, K, true>(row_ptr<T>(out, r) + begin, row_ptr<T>(gate, r) + begin,
                              row_ptr<T>(up, r) + begin, end - begin);
    });
  });
}

void gelu_kernel(Dtype dtype, Gelu gelu, Extent e, Rows out, ConstRows input) {
  dispatch(dtype, gelu, [&](auto storage, auto kind) {
    using T = decltype(storage);
    constexpr Gelu K = decltype(kind)::value;
    advise_huge_pages<T>(out, e);
    for_each_row_segment(e, [&](int64_t r, int64_t begin, int64_t end) {
      forward_row<T, K, false>(row_ptr<T>(out, r) + begin, row_ptr<T>(input, r) + begin,
                               nullptr, end - begin);
    });
  });
}

void geglu_backward_kernel(Dtype dtype, Gelu gelu, Extent e, Rows grad_gate, Rows grad_up,
                           ConstRows grad_out, ConstRows gate, ConstRows up) {
  dispatch(dtype, gelu, [&](auto storage, auto kind) {
    using T = decltype(storage);
    constexpr Gelu K = decltype(kind)::value;
    advise_huge_pages<T>(grad_gate, e);
    advise_huge_pages<T>(grad_up, e);
    for_each_row_segment(e, [&](int64_t r, int64_t begin, int64_t end) {
      backward_row<T, K>(row_ptr<T>(grad_gate, r) + begin, row_ptr<T>(grad_up, r) + begin,
                         row_ptr<T>(grad_out, r) + begin, row_ptr<T>(gate, r) + begin,
                         row_ptr<T>(up, r) + begin, end - begin);
    });
  });
}

// Constant-initialized (no code runs to build it), so taking its address is safe
// from a load-time initializer compiled for the baseline ISA.
constexpr KernelTable kKernelTable{GEGLU_CPU_STR(CPU_CAPABILITY), &geglu_kernel, &gelu_kernel,
                                   &geglu_backward_kernel};

} // namespace
} // namespace geglu_cpu
