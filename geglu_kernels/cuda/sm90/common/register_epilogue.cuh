#pragma once
// The register-level epilogues of the Hopper kernels here (GegluEpilogue,
// SwapAbEpilogue, SplitKEpilogue, FusedEpilogue, Fp8GegluEpilogue): what each shows
// CUTLASS 3.x besides its operator() (RegisterEpilogue: the collective-epilogue
// interface the sm90 warp-specialized kernels and Sm90TmaWarpSpecializedAdapter read, for
// an epilogue with no shared memory, no workspace and no source tensor C, whose Params
// are its Arguments as given), and the register moves they share on the sm90 wgmma
// accumulator fragment (packing to 16-bit pairs, bias pairs, the transpose across the
// quad of threads that shares a row).
//
// Device and host code; include after the CUTLASS headers.

#include <cstddef>
#include <cstdint>

#include "cute/tensor.hpp"
#include "cutlass/array.h"
#include "cutlass/cutlass.h"
#include "cutlass/numeric_conversion.h"

namespace sm90_epilogue {

// The output strides, (M, N, L) of the GEMM CUTLASS sees: out[m][n] with n contiguous, or
// transposed (the swap-AB kernels: out[n][m], the GEMM's M contiguous).
using StrideRowMajor = cute::Stride<int64_t, cute::Int<1>, int64_t>;
using StrideTransposed = cute::Stride<cute::Int<1>, int64_t, int64_t>;

// Derived: the epilogue (CRTP), which defines
//   template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class Accumulators, class TiledMma>
//   CUTLASS_DEVICE void store_tile(ProblemShapeMNKL, BlockShapeMNK, BlockCoordMNKL, Accumulators const&, TiledMma,
//                                  int thread_idx);
// for one output tile: the problem shape, the tile's shape and coordinate, this thread's
// accumulators, the tiled MMA that laid them out, and the thread's index in the consumers.
template <class Derived, class Element_, class Arguments_, class StrideCD>
class RegisterEpilogue {
 public:
  using Element = Element_;
  // Names the kernels read (their C/D typedefs); C is never loaded.
  using ElementC = Element;
  using ElementD = Element;
  using StrideC = StrideCD;
  using StrideD = StrideCD;
  using GmemTiledCopyC = void;
  using GmemTiledCopyD = void;
  struct SharedStorage {};
  using TensorStorage = SharedStorage;
  using Arguments = Arguments_;
  using Params = Arguments_;

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const&, Arguments const& args, void*) {
    return args;
  }
  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&) {
    return 0;
  }
  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*, cudaStream_t,
                                              cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }
  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const&) {
    return true;
  }

  // The adapter constructs an epilogue from its Params (and shared storage, unused here);
  // the epilogues inherit this constructor.
  CUTLASS_HOST_DEVICE RegisterEpilogue(Params const& params_, SharedStorage const& = SharedStorage())
      : params(params_) {}
  CUTLASS_DEVICE bool is_source_needed() { return false; }

  // CUTLASS's per-tile call (through Sm90TmaWarpSpecializedAdapter), handed to the
  // epilogue's store_tile: a register epilogue bounds its stores by the problem shape
  // (no residue) and has no shared memory.
  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine, class FrgLayout,
            class TiledMma, class ResidueMNK>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK blk_shape_mnk,
                                 BlockCoordMNKL blk_coord_mnkl, cute::Tensor<FrgEngine, FrgLayout> const& accumulators,
                                 TiledMma tiled_mma, ResidueMNK, int thread_idx, char*) {
    static_cast<Derived*>(this)->store_tile(problem_shape_mnkl, blk_shape_mnk, blk_coord_mnkl, accumulators, tiled_mma,
                                            thread_idx);
  }

 protected:
  Params params;
};

// ---------------------------------------------------------------------- register moves

// Two floats rounded to one 16-bit Element pair (bf16 / fp16), the first in the low half.
template <class Element>
CUTLASS_DEVICE uint32_t pack2(float a, float b) {
  cutlass::NumericArrayConverter<Element, float, 2> cvt;
  cutlass::Array<float, 2> f;
  f[0] = a;
  f[1] = b;
  cutlass::Array<Element, 2> e = cvt(f);
  return reinterpret_cast<uint32_t const&>(e);
}

template <class Element>
CUTLASS_DEVICE float2 unpack2(uint32_t v) {
  cutlass::Array<Element, 2> e = reinterpret_cast<cutlass::Array<Element, 2> const&>(v);
  return make_float2(float(e[0]), float(e[1]));
}

// Bias values of columns c + 8j, c + 8j + 1 (c even) for j < N, packed as pack2 does: the
// columns of one thread in the sm90 C fragment. Zero past H or without bias. Pointer
// 4-byte aligned (the launchers check).
template <int N, class Element>
CUTLASS_DEVICE void load_bias_pairs(Element const* bias, int c, int H, uint32_t (&v)[N]) {
  CUTLASS_PRAGMA_UNROLL
  for (int j = 0; j < N; ++j) v[j] = 0u;
  if (bias == nullptr) return;
  CUTLASS_PRAGMA_UNROLL
  for (int j = 0; j < N; ++j) {
    const int col = c + 8 * j;
    // volatile asm: issued here, all N in flight, waited on only at first use
    if (col + 1 < H) {
      asm volatile("ld.global.nc.b32 %0, [%1];" : "=r"(v[j]) : "l"(bias + col));
    } else if (col < H) {
      uint16_t h;
      asm volatile("ld.global.nc.b16 %0, [%1];" : "=h"(h) : "l"(bias + col));
      v[j] = h;
    }
  }
}

// A 4x4 transpose of 32-bit words across the quad of threads that shares a row of the
// sm90 C fragment: thread t holds p[c] = A[t][c]; afterwards p[c] = A[c][t]. A thread's
// words of 4 column blocks become one block's consecutive columns: one wide store.
CUTLASS_DEVICE void quad_transpose(uint32_t (&p)[4], int t) {
  const bool b0 = t & 1;
  uint32_t x = b0 ? p[0] : p[1];
  uint32_t y = b0 ? p[2] : p[3];
  x = __shfl_xor_sync(0xffffffffu, x, 1);
  y = __shfl_xor_sync(0xffffffffu, y, 1);
  if (b0) { p[0] = x; p[2] = y; } else { p[1] = x; p[3] = y; }
  const bool b1 = t & 2;
  x = b1 ? p[0] : p[2];
  y = b1 ? p[1] : p[3];
  x = __shfl_xor_sync(0xffffffffu, x, 2);
  y = __shfl_xor_sync(0xffffffffu, y, 2);
  if (b1) { p[0] = x; p[1] = y; } else { p[2] = x; p[3] = y; }
}

}  // namespace sm90_epilogue
