#pragma once
// The CollectiveMma both swap-AB kernels build on (geglu_swapab_sm90.cu, the gate/up;
// linear_swapab_sm90.cu, the split-K down projection): CUTLASS's sm90 warp-specialized TMA
// mainloop with the weights as A on the wgmma's 128-row side and the tokens as B on its
// 16-wide side (both K-contiguous), 64-wide k-tiles, no cluster, the pingpong schedule, and
// as many stages as fit beside the epilogue's shared memory. Each kernel wraps it in its
// own mainloop (which descriptors, how k-tiles map to work units); written once, the two
// share one shared-memory layout and pipeline.
//
// Device and host code; include after the CUTLASS headers.

#include "cute/tensor.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/dispatch_policy.hpp"

namespace swapab_collective {

using TileShape = cute::Shape<cute::_128, cute::_16, cute::_64>;
using ClusterShape = cute::Shape<cute::_1, cute::_1, cute::_1>;

template <class Element, int EpilogueSmemBytes>
using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
    Element, cutlass::layout::RowMajor, 8,     // A = the weights [rows, K], K contiguous
    Element, cutlass::layout::ColumnMajor, 8,  // B = the tokens [M, K], K contiguous
    float, TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<EpilogueSmemBytes>,
    cutlass::gemm::KernelTmaWarpSpecializedPingpong>::CollectiveOp;

}  // namespace swapab_collective
