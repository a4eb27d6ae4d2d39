#pragma once

// The GeGLU row kernels, written once over ATen's at::vec::Vectorized and compiled
// once per instruction set. The including file defines CPU_CAPABILITY (ATen's inline
// namespace for Vectorized: DEFAULT, AVX2 or AVX512) and, for AVX2 / AVX-512,
// CPU_CAPABILITY_AVX2 / CPU_CAPABILITY_AVX512 before any include, as ATen's own
// per-capability kernel files are compiled. Everything here has internal linkage, so
// the copies in different files never meet at link time.
//
// Do not define static data with a dynamic initializer here: it would run at load
// time with the including file's instruction set, on every CPU.

#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <tuple>
#include <type_traits>

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
// One set of formulas for the vector body (V = fVec) and the scalar tail (V = float).

inline float erf_(float x) { return std::erf(x); }
inline float tanh_(float x) { return std::tanh(x); }
inline float exp_(float x) { return std::exp(x); }
inline fVec erf_(const fVec &x) { return x.erf(); }
inline fVec tanh_(const fVec &x) { return x.tanh(); }
inline fVec exp_(const fVec &x) { return x.exp(); }

constexpr float kSqrtHalf = 0.70710678118654752440f;   // 1 / sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143267794f; // 1 / sqrt(2 pi)
constexpr float kBeta = 0.79788456080286535588f;       // sqrt(2 / pi)
constexpr float kKappa = 0.044715f;

// gelu(x) = x * Phi(x)                                     (approximate="none")
//         ~ x/2 * (1 + tanh(beta * (x + kappa x^3)))       (approximate="tanh")
template <Gelu kind, typename V> inline V gelu(const V &x) {
  const V half_x = x * V(0.5f);
  if constexpr (kind == Gelu::kErf) {
    return half_x + half_x * erf_(x * V(kSqrtHalf));
  } else {
    const V inner = x * (V(kBeta) + V(kBeta * kKappa) * x * x);
    return half_x + half_x * tanh_(inner);
  }
}

// gelu(x) and its exact derivative, which the backward needs together.
template <Gelu kind, typename V>
inline void gelu_with_derivative(const V &x, V &value, V &slope) {
  if constexpr (kind == Gelu::kErf) {
    // d/dx [x Phi(x)] = Phi(x) + x phi(x),  phi(x) = exp(-x^2/2) / sqrt(2 pi)
    const V cdf = V(0.5f) + V(0.5f) * erf_(x * V(kSqrtHalf));
    const V pdf = exp_(V(-0.5f) * x * x) * V(kInvSqrt2Pi);
    value = x * cdf;
    slope = cdf + x * pdf;
  } else {
    // t = tanh(beta (x + kappa x^3)):
    // d/dx [x/2 (1 + t)] = (1 + t)/2 + x/2 (1 - t^2) beta (1 + 3 kappa x^2)
    const V x2 = x * x;
    const V t = tanh_(x * (V(kBeta) + V(kBeta * kKappa) * x2));
    const V half_1pt = V(0.5f) + V(0.5f) * t;
    const V dinner = V(kBeta) + V(3.0f * kBeta * kKappa) * x2;
    value = x * half_1pt;
    slope = half_1pt + V(0.5f) * x * ((V(1.0f) - t * t) * dinner);
  }
}

// ---------------------------------------------------------------- storage <-> float32
// Every step handles 2 * fVec::size() elements: one Vectorized<T> of a 16-bit type,
// or two float vectors.
constexpr int64_t kStep = 2 * fVec::size();

template <typename T> inline void load_float(const T *p, fVec &a, fVec &b) {
  if constexpr (std::is_same_v<T, float>) {
    a = fVec::loadu(p);
    b = fVec::loadu(p + fVec::size());
  } else {
    static_assert(at::vec::Vectorized<T>::size() == kStep);
    std::tie(a, b) = at::vec::convert_to_float<T>(at::vec::Vectorized<T>::loadu(p));
  }
}

template <typename T> inline void store_float(T *p, const fVec &a, const fVec &b) {
  if constexpr (std::is_same_v<T, float>) {
    a.store(p);
    b.store(p + fVec::size());
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
  at::parallel_for(0, e.rows * segments, grain, [&](int64_t first, int64_t last) {
    for (int64_t task = first; task < last; ++task) {
      const int64_t row = task / segments;
      const int64_t begin = (task % segments) * kSegment;
      fn(row, begin, std::min(begin + kSegment, e.width));
    }
  });
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
