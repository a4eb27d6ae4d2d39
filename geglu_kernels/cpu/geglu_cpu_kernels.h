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
// One set of formulas for the vector body (V = fVec) and the scalar tail (V = float),
// written with the small helpers below.

inline float fmadd_(float a, float b, float c) { return a * b + c; }
inline float abs_(float x) { return std::fabs(x); }
inline float exp_(float x) { return std::exp(x); }
inline float min_(float a, float b) { return std::fmin(a, b); }
inline float clamp_(float x, float lo, float hi) { return std::fmin(std::fmax(x, lo), hi); }
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
inline fVec clamp_(const fVec &x, float lo, float hi) {
  return at::vec::clamp(x, fVec(lo), fVec(hi));
}
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

// Phi(x), the standard normal CDF, for the forward pass: (1 + erf(x / sqrt 2)) / 2 with
// erf(x / sqrt 2) a rational minimax fit x P(x^2) / Q(x^2) on |x| <= 4 sqrt 2 (beyond
// it, erf is +-1 in float32), fitted for this kernel: max abs error 3.5e-7 in float32
// arithmetic (ATen's Vectorized::erf: 5.5e-7) for 11 FMAs and one division, half the
// work of an exp-based formula. Below -4 sqrt 2, Phi is set to exactly 0, so that
// gelu(x) = x Phi(x) is 0 there rather than x times the fit's last-ulp error.
template <typename V> inline V normal_cdf_fast(const V &x) {
  static constexpr float kP[] = {7.978843775e-01f, 6.741963062e-02f, 9.328145194e-03f,
                                 3.343893474e-04f, 1.263983914e-05f, 4.529431821e-08f};
  static constexpr float kQ[] = {1.0f,             2.511634765e-01f, 2.855349441e-02f,
                                 1.873737541e-03f, 7.306502845e-05f, 1.192670625e-06f};
  constexpr float kLimit = 5.656854249f; // 4 sqrt 2
  const V z = clamp_(x, -kLimit, kLimit);
  const V z2 = z * z;
  const V erf = z * polynomial(z2, kP) / polynomial(z2, kQ);
  return where_less(x, V(-kLimit), V(0.0f), fmadd_(erf, V(0.5f), V(0.5f)));
}

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

// gelu(x) = x * Phi(x) = x/2 * (1 + erf(x / sqrt 2))          (approximate="none")
//         ~ x/2 * (1 + tanh(beta * (x + kappa x^3)))           (approximate="tanh")
template <Gelu kind, typename V> inline V gelu(const V &x) {
  if constexpr (kind == Gelu::kErf) {
    return x * normal_cdf_fast(x);
  } else {
    return x / (V(1.0f) + exp_(minus_two_z(x)));
  }
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
    // Beyond |x| = kTanhSaturation the float32 results are exactly gelu = 0, slope = 0
    // (x < 0) and slope = 1 (x > 0). The formula cannot give them: the clamped s times
    // a huge x is not 0 (gelu(-3e38) would be -5e3), and x^2 overflows near 1.8e19
    // (0 * inf). Selects, not a clamp of x, so a NaN x stays NaN.
    const V lo(-kTanhSaturation), hi(kTanhSaturation), zero(0.0f), one(1.0f);
    value = where_less(x, lo, zero, value);
    slope = where_less(x, lo, zero, where_less(hi, x, one, slope));
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

// ---------------------------------------------------------------- row kernels
// Each processes n consecutive elements of one row: vector steps, then a scalar tail
// for the n % kStep elements left (the same formulas in scalar float32).

// out = gelu(gate) * up   (kGated)   or   out = gelu(gate)   (!kGated; up unused)
template <typename T, Gelu kind, bool kGated>
void forward_row(T *out, const T *gate, const T *up, int64_t n) {
  int64_t i = 0;
  for (; i + kStep <= n; i += kStep) {
    fVec g0, g1;
    load_float(gate + i, g0, g1);
    fVec y0 = gelu<kind>(g0), y1 = gelu<kind>(g1);
    if constexpr (kGated) {
      fVec u0, u1;
      load_float(up + i, u0, u1);
      y0 = y0 * u0;
      y1 = y1 * u1;
    }
    store_float(out + i, y0, y1);
  }
  for (; i < n; ++i) {
    float y = gelu<kind>(static_cast<float>(gate[i]));
    if constexpr (kGated) {
      y *= static_cast<float>(up[i]);
    }
    out[i] = static_cast<T>(y);
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
