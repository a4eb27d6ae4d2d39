#pragma once
// The producer side of the warp-specialized TMA mainloops here (GegluMainloopSm90,
// SwapAbMainloop, SplitKMainloop, Fp8GegluMainloopSm90), as CUTLASS's stock sm90 mainloop
// does it and each of them does it again around its own descriptors: an operand viewed as
// the tiles TMA loads, and the loop that feeds a work tile's k-tiles into the pipeline.
//
// Device code; include after the CUTLASS headers.

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"

namespace tma_producer {

enum class Operand { A, B };

// A TMA operand of shape (rows, K, L) as the tiles of TileShape (BM, BN, BK) it is loaded
// in: (BM, BK, m, k, L) for A, (BN, BK, n, k, L) for B.
template <Operand kOperand, class TileShape, class Tma, class ShapeRKL>
CUTLASS_DEVICE auto tiled(Tma const& tma, ShapeRKL const& shape) {
  using X = cute::Underscore;
  using Step = cute::conditional_t<kOperand == Operand::A, cute::Step<cute::_1, X, cute::_1>,
                                   cute::Step<X, cute::_1, cute::_1>>;
  return cute::local_tile(tma.get_tma_tensor(shape), TileShape{}, cute::make_coord(cute::_, cute::_, cute::_),
                          Step{});
}

// The stock mainloop's transaction byte counts in the Params of a mainloop that loads
// what it loads (the same A and B boxes a stage, however many descriptors they come
// through): the bytes each stage's barrier waits for.
template <class Mma, class Params>
void set_stage_transaction_bytes(Params& p) {
  p.tma_transaction_bytes_mk = Mma::TmaTransactionBytesMK;
  p.tma_transaction_bytes_nk = Mma::TmaTransactionBytesNK;
  p.tma_transaction_bytes = Mma::TmaTransactionBytesMK + Mma::TmaTransactionBytesNK;
}

// For each of a work tile's k_tile_count k-tiles: waits until the next stage is free, then
// issue(barrier, k, stage) issues the k-tile's TMA copies into that stage on its
// transaction barrier (the stage completes when all the bytes it expects have landed).
template <class Pipeline, class PipelineState, class KTileIterator, class Issue>
CUTLASS_DEVICE void for_each_k_tile(Pipeline& pipeline, PipelineState& smem_pipe_write, KTileIterator& k_tile_iter,
                                    int k_tile_count, Issue&& issue) {
  CUTLASS_PRAGMA_NO_UNROLL
  for (; k_tile_count > 0; --k_tile_count) {
    pipeline.producer_acquire(smem_pipe_write);
    using BarrierType = typename Pipeline::ProducerBarrierType;
    BarrierType* tma_barrier = pipeline.producer_get_barrier(smem_pipe_write);
    int stage = smem_pipe_write.index();
    int k = *k_tile_iter;
    issue(*tma_barrier, k, stage);
    ++k_tile_iter;
    ++smem_pipe_write;
  }
}

}  // namespace tma_producer
