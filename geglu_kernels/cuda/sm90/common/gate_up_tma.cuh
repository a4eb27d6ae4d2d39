#pragma once
// The gate and up weights of a GeGLU GEMM loaded as the two halves of one operand's
// pipeline stage, through two TMA descriptors: per k-tile, a tile's gate rows go into smem
// rows [0, R) of the stage and its up rows into rows [R, 2R). One wgmma accumulator (or
// one pair of m64 atoms) then carries both, and the epilogue finds the gate and the up
// value of an output column in the same thread. The two weights are any two 16-byte-
// aligned [H, K] pointers (a merged [2H, K] weight is up = gate + H*ldw); rows past H are
// zero-filled by TMA per descriptor, so H needs no alignment to the tile.
//
// The mainloops that read their weights this way, each on the stock CollectiveMma's smem
// layouts and pipeline: GegluMainloopSm90 (geglu_gemm_sm90.cuh; the weights are B),
// SwapAbMainloop (geglu_swapab_sm90.cuh; A) and Fp8GegluMainloopSm90 (fp8_geglu_sm90.cuh;
// B, e4m3). Each issues the copies of a k-tile in its own order; this piece issues the
// two halves' (gate, then up) where it is called.
//
// Device and host code; include after the CUTLASS headers.

#include <cstdint>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"

#include "sm90/common/tma_producer.cuh"

namespace gate_up_tma {

using tma_producer::Operand;

// The stock CollectiveMma's types for one of its operands.
template <Operand kOperand, class Mma>
struct OperandTypes {
  using GmemTiledCopy = typename Mma::GmemTiledCopyA;
  using Stride = typename Mma::StrideA;
  using SmemLayoutAtom = typename Mma::SmemLayoutAtomA;
  using SmemLayout = typename Mma::SmemLayoutA;
};
template <class Mma>
struct OperandTypes<Operand::B, Mma> {
  using GmemTiledCopy = typename Mma::GmemTiledCopyB;
  using Stride = typename Mma::StrideB;
  using SmemLayoutAtom = typename Mma::SmemLayoutAtomB;
  using SmemLayout = typename Mma::SmemLayoutB;
};

// The two descriptors (what a mainloop's Params holds) and the layout facts they rely on.
// kOperand: which operand of the CollectiveMma `Mma` the weights are (it picks the
// multicast direction of the descriptors and which mode of the tile is the weights'
// rows; the copy atom, strides, smem layouts and cluster are Mma's). Element: the type
// the descriptors are built over (Mma's internal element). TileShapeHalf: the CTA tile
// with the weights' extent halved.
template <Operand kOperand, class Mma, class Element, class TileShapeHalf>
struct GateUpTma {
  using GmemTiledCopy = typename OperandTypes<kOperand, Mma>::GmemTiledCopy;
  using Stride = typename OperandTypes<kOperand, Mma>::Stride;
  using SmemLayoutAtom = typename OperandTypes<kOperand, Mma>::SmemLayoutAtom;
  using SmemLayout = typename OperandTypes<kOperand, Mma>::SmemLayout;
  using ClusterShape = typename Mma::DispatchPolicy::ClusterShape;

  static constexpr bool kIsA = kOperand == Operand::A;
  static constexpr int kRows = cute::size<kIsA ? 0 : 1>(TileShapeHalf{});  // weight rows per half
  static constexpr int kBK = cute::size<2>(TileShapeHalf{});
  // With one 128-byte swizzle atom per row in K, rows [h*R, h*R + R) of a stage of
  // SmemLayout are exactly SmemLayoutHalf at element offset h*R*BK (checked below): each
  // half is one dense box that a single TMA copy fills.
  static_assert(kBK * cute::sizeof_bits_v<Element> == 128 * 8,
                "one 128B swizzle atom per row in K: each half tile is then contiguous in smem");
  using SmemLayoutHalf =
      decltype(cute::tile_to_shape(SmemLayoutAtom{}, cute::make_shape(cute::Int<kRows>{}, cute::Int<kBK>{})));
  static constexpr int kHalfElems = kRows * kBK;
  static constexpr int kStageElems = 2 * kHalfElems;
  static_assert(cute::cosize_v<SmemLayoutHalf> == kHalfElems, "half tile must be dense");
  static_assert(SmemLayout{}(0, 0, 1) == kStageElems, "stage stride of the weights' smem");
  static_assert(SmemLayout{}(kRows, 0, 0) == kHalfElems, "up half of the weights' smem starts at R*BK");
  static_assert(SmemLayout{}(kRows + 9, 17, 0) == kHalfElems + SmemLayoutHalf{}(9, 17),
                "up half of the weights' smem has the half-tile layout");

  // The descriptor of one [H, K, L] weight, boxes of one half tile.
  template <class ShapeHKL>
  static auto make_descriptor(Element const* ptr, ShapeHKL const& shape, Stride const& stride) {
    auto tensor = cute::make_tensor(ptr, cute::make_layout(shape, stride));
    if constexpr (kIsA) {
      return cute::make_tma_copy_A_sm90(GmemTiledCopy{}, tensor, SmemLayoutHalf{}, TileShapeHalf{}, ClusterShape{});
    } else {
      return cute::make_tma_copy_B_sm90(GmemTiledCopy{}, tensor, SmemLayoutHalf{}, TileShapeHalf{}, ClusterShape{});
    }
  }
  using Tma = decltype(make_descriptor(nullptr, cute::repeat_like(Stride{}, int32_t(0)), Stride{}));

  Tma gate;
  Tma up;

  // Host: the descriptors over gate and up, both [H, K, L] with the same strides.
  template <class ShapeHKL>
  static GateUpTma make(Element const* gate, Element const* up, ShapeHKL const& shape, Stride const& stride) {
    return {make_descriptor(gate, shape, stride), make_descriptor(up, shape, stride)};
  }

  CUTLASS_DEVICE void prefetch() const {
    cute::prefetch_tma_descriptor(gate.get_tma_descriptor());
    cute::prefetch_tma_descriptor(up.get_tma_descriptor());
  }

  // The gate and the up weight as (R, BK, row tiles, k-tiles, L) tiles: ceil(H / R) row
  // tiles, the scheduler's ceil(2H / 2R) along the weights' mode.
  template <class ShapeHKL>
  CUTLASS_DEVICE auto tiles(ShapeHKL const& shape) const {
    return cute::make_tuple(tma_producer::tiled<kOperand, TileShapeHalf>(gate, shape),
                            tma_producer::tiled<kOperand, TileShapeHalf>(up, shape));
  }

  // The producer's view of one work tile: the gate and up rows of its k-tiles (sources)
  // and the two halves of stage 0 (destinations; stage s is the same at + s*kStageElems).
  template <class GateSrc, class UpSrc, class GateDst, class UpDst>
  struct TileLoads {
    GateSrc gate_src;
    UpSrc up_src;
    GateDst gate_dst0;
    UpDst up_dst0;
  };

  // g_gate, g_up: (R, BK, k-tiles) of the work tile; smem: the operand's stage 0; slice:
  // this CTA's multicast slice of the descriptors (0 without a cluster).
  template <class GGate, class GUp, class SmemElement>
  CUTLASS_DEVICE auto tile_loads(int slice, GGate const& g_gate, GUp const& g_up, SmemElement* smem) const {
    auto tma_gate = gate.get_slice(slice);
    auto tma_up = up.get_slice(slice);
    auto gate_src = tma_gate.partition_S(g_gate);
    auto up_src = tma_up.partition_S(g_up);
    auto gate_dst0 = tma_gate.partition_D(cute::make_tensor(cute::make_smem_ptr(smem), SmemLayoutHalf{}));
    auto up_dst0 = tma_up.partition_D(cute::make_tensor(cute::make_smem_ptr(smem + kHalfElems), SmemLayoutHalf{}));
    return TileLoads<decltype(gate_src), decltype(up_src), decltype(gate_dst0), decltype(up_dst0)>{
        gate_src, up_src, gate_dst0, up_dst0};
  }

  // Issues k-tile k's gate and up copies into stage `stage` on the stage's barrier.
  template <class Loads, class Barrier>
  CUTLASS_DEVICE void copy(Loads const& t, Barrier& barrier, uint16_t mcast_mask, cute::TMA::CacheHintSm90 hint,
                           int k, int stage) const {
    using cute::_;
    cute::Tensor gate_dst = cute::make_tensor(t.gate_dst0.data() + stage * kStageElems, t.gate_dst0.layout());
    cute::Tensor up_dst = cute::make_tensor(t.up_dst0.data() + stage * kStageElems, t.up_dst0.layout());
    cute::copy(gate.with(barrier, mcast_mask, hint), t.gate_src(_, _, _, k), gate_dst);
    cute::copy(up.with(barrier, mcast_mask, hint), t.up_src(_, _, _, k), up_dst);
  }
};

}  // namespace gate_up_tma
