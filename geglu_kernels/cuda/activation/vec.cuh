#pragma once
// Packs: N consecutive elements moved by one global memory instruction, and their
// conversion to and from float32 (the precision all arithmetic runs in).

#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace geglu_cuda {

// 16 bytes is the widest single global load/store (LDG.128 / STG.128): one
// instruction moves 8 bf16/fp16 or 4 fp32 elements.
constexpr int kVecBytes = 16;

template <typename T>
constexpr int kPackElems = kVecBytes / static_cast<int>(sizeof(T));

// N elements aligned to their full size, so that loading a Pack compiles to a single
// vector instruction (the caller guarantees the address is that aligned).
template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

template <typename T, int N>
__device__ __forceinline__ Pack<T, N> load_pack(const T *p) {
  return *reinterpret_cast<const Pack<T, N> *>(p);
}

template <typename T, int N>
__device__ __forceinline__ void store_pack(T *p, const Pack<T, N> &pack) {
  *reinterpret_cast<Pack<T, N> *>(p) = pack;
}

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

// A whole pack to floats. bf16 is the top half of a float, so each 32-bit word of
// two bf16 gives two floats with one shift and one mask, straight from the loaded
// register (element-wise conversion through 16-bit registers costs ptxas ~30% more
// registers in these kernels, hence occupancy).
template <typename T, int N>
__device__ __forceinline__ void unpack_to_floats(const Pack<T, N> &p, float (&f)[N]) {
  if constexpr (std::is_same_v<T, __nv_bfloat16> && N % 2 == 0) {
    const uint32_t *w = reinterpret_cast<const uint32_t *>(p.v);
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
      f[2 * i] = __uint_as_float(w[i] << 16);
      f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  } else if constexpr (std::is_same_v<T, __half> && N % 2 == 0) {
    const __half2 *h = reinterpret_cast<const __half2 *>(p.v);
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
      const float2 v = __half22float2(h[i]);
      f[2 * i] = v.x;
      f[2 * i + 1] = v.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) f[i] = to_float(p.v[i]);
  }
}

// Round-to-nearest-even, as PyTorch's own casts do.
template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// x rounded to T and widened back: the float value a T tensor holds after storing x
// (eager rounds F.gelu's result to the storage type before a following multiply).
template <typename T>
__device__ __forceinline__ float round_to(float x) {
  return to_float(from_float<T>(x));
}

// Two floats to one 32-bit pair: a single cvt.rn.{bf16x2,f16x2}.f32 instruction.
__device__ __forceinline__ __half2 pair_from_floats(__half, float a, float b) {
  return __floats2half2_rn(a, b);
}
__device__ __forceinline__ __nv_bfloat162 pair_from_floats(__nv_bfloat16, float a, float b) {
  return __floats2bfloat162_rn(a, b);
}

template <typename T, int N>
__device__ __forceinline__ Pack<T, N> pack_from_floats(const float (&f)[N]) {
  Pack<T, N> p;
  if constexpr (std::is_same_v<T, float> || N % 2 != 0) {
#pragma unroll
    for (int i = 0; i < N; ++i) p.v[i] = from_float<T>(f[i]);
  } else {
    using Pair = decltype(pair_from_floats(T{}, 0.f, 0.f));
    Pair *pairs = reinterpret_cast<Pair *>(p.v);
#pragma unroll
    for (int i = 0; i < N / 2; ++i) pairs[i] = pair_from_floats(T{}, f[2 * i], f[2 * i + 1]);
  }
  return p;
}

}  // namespace geglu_cuda
