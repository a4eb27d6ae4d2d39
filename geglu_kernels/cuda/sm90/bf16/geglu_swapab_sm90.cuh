#pragma once
// The GeGLU gate/up for a few tokens on Hopper (sm_90a), swap-AB: CUTLASS 3.x collectives
// and the kernel type (geglu_swapab_sm90.cu has the C launcher, geglu_swapab_sm90.h the
// ABI; mlp_fused_sm90.cu runs the same mainloop and epilogue as the decode MLP's first half).
//
//   out[m, h] = gelu(x[m] . Wg[h] + bg[h]) * (x[m] . Wu[h] + bu[h])
//
// At a few tokens the gate/up is a weight read (Gemma-7B: 302 MB for 0.15 GFLOP per
// token), and the engine (geglu_gemm_sm90.cu) puts the tokens on the wgmma's 64-row side,
// most of it empty. Here the GEMM CUTLASS sees has the weights on the 128-row side and the
// tokens on the 16-wide one: D[2H, M] = W x^T, problem (2H, M, K).
// - Mainloop (SwapAbMainloop): the stock sm90 warp-specialized TMA mainloop with A read
//   through two descriptors (gate_up_tma.cuh). A tile is 64 hidden units: each k-step the
//   producer loads their gate rows into smem A rows [0, 64) and their up rows into
//   [64, 128) (the engine's GegluMainloopSm90 with A and B exchanged). Rows past H are zero-filled by TMA
//   per descriptor, so H needs no alignment to the tile; ceil(2H / 128) scheduler tiles
//   are the ceil(H / 64) unit blocks.
// - Pingpong schedule, 128 x 16 x 64 tile: the one consumer warpgroup of a tile holds two
//   m64 accumulators, the gate and the up of the same unit in the same registers of the
//   same thread (a cooperative tile would split them over its two warpgroups).
// - Epilogue (SwapAbEpilogue), register level: bias, GELU and product in float32, one
//   rounding, written transposed (out[token][unit]) with 2-byte stores: the output is
//   16 tokens x H, a few hundred KB against the weights' hundreds of MB.
// - The weights are loaded with an evict-first L2 hint: they are read once, and h, which
//   the down projection reads next, stays in L2 (MLP at Gemma-7B, 16 tokens, H200: 117.7
//   against 118.8 us with cuBLAS's addmm after it; docs/DESIGN.md).
// Measured against the engine, cuBLAS and the decode kernels it replaced at 1-4 tokens:
// docs/DESIGN.md, "The swap-AB gate/up".

#include <cstdint>

#include "cutlass/cutlass.h"
#include "cutlass/gemm/gemm.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "cute/tensor.hpp"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/epilogue/collective/detail.hpp"

#include "sm90/common/gate_up_tma.cuh"
#include "activation/gelu_math.cuh"
#include "sm90/common/register_epilogue.cuh"
#include "sm90/common/tma_producer.cuh"
#include "sm90/bf16/swapab_collective.cuh"

namespace geglu_swapab {

using namespace cute;

// Mainloop: the stock sm90 warp-specialized TMA mainloop (its smem layouts, pipeline and
// consumer loop as they are), A (the weights) from two descriptors, half a tile each.
template <class Base>
struct SwapAbMainloop : Base {
  using typename Base::TileShape;
  using typename Base::ElementA;
  using typename Base::StrideA;
  using typename Base::StrideB;
  using typename Base::GmemTiledCopyB;
  using typename Base::MainloopPipeline;
  using typename Base::PipelineState;
  using typename Base::TensorStorage;
  using typename Base::InternalElementA;
  using typename Base::InternalElementB;
  using typename Base::ElementB;
  using ClusterShape = typename Base::DispatchPolicy::ClusterShape;

  static constexpr int BM = size<0>(TileShape{});
  static constexpr int BN = size<1>(TileShape{});
  static constexpr int BK = size<2>(TileShape{});
  static constexpr int BH = BM / 2;  // hidden units per tile
  using TileShapeHalf = Shape<Int<BH>, Int<BN>, Int<BK>>;
  using WeightTma = gate_up_tma::GateUpTma<tma_producer::Operand::A, Base, InternalElementA, TileShapeHalf>;

  struct Arguments {
    ElementA const* ptr_Ag;  // gate weight [H, K], row stride get<0>(dA)
    ElementA const* ptr_Au;  // up weight   [H, K], same strides
    StrideA dA;
    ElementB const* ptr_B;   // x [M, K]
    StrideB dB;
  };

  struct Params : Base::Params {
    WeightTma tma_load_gate_up;
  };

  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args, void*) {
    auto [M2, N, K, L] = append<4>(problem_shape, 1);
    auto H = M2 / 2;
    auto ptr_B = reinterpret_cast<InternalElementB const*>(args.ptr_B);
    Tensor tensor_b = make_tensor(ptr_B, make_layout(make_shape(N, K, L), args.dB));
    Params p;
    p.tma_load_b = make_tma_copy_B_sm90(GmemTiledCopyB{}, tensor_b, typename Base::SmemLayoutB{}(_, _, Int<0>{}),
                                        TileShape{}, ClusterShape{});
    p.tma_load_gate_up = WeightTma::make(reinterpret_cast<InternalElementA const*>(args.ptr_Ag),
                                         reinterpret_cast<InternalElementA const*>(args.ptr_Au), make_shape(H, K, L),
                                         args.dA);
    tma_producer::set_stage_transaction_bytes<Base>(p);  // A's: both halves together
    return p;
  }

  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const&) {
    return true;  // the launcher checks alignment
  }

  CUTLASS_DEVICE
  static void prefetch_tma_descriptors(Params const& p) {
    p.tma_load_gate_up.prefetch();
    cute::prefetch_tma_descriptor(p.tma_load_b.get_tma_descriptor());
  }

  // Returns (gAg_mkl, gAu_mkl, gB_nkl): ceil(H / BH) m tiles, the scheduler's ceil(2H / BM).
  template <class ProblemShape_MNKL>
  CUTLASS_DEVICE auto load_init(ProblemShape_MNKL const& problem_shape_MNKL, Params const& p) const {
    auto [M2, N, K, L] = problem_shape_MNKL;
    auto H = M2 / 2;
    auto [gAg, gAu] = p.tma_load_gate_up.tiles(make_shape(H, K, L));
    return cute::make_tuple(gAg, gAu,
                            tma_producer::tiled<tma_producer::Operand::B, TileShape>(p.tma_load_b, make_shape(N, K, L)));
  }

  template <class TensorAg, class TensorAu, class TensorB, class KTileIterator, class BlockCoord>
  CUTLASS_DEVICE void load(Params const& p, MainloopPipeline pipeline, PipelineState smem_pipe_write,
                           cute::tuple<TensorAg, TensorAu, TensorB> const& load_inputs,
                           BlockCoord const& blk_coord, KTileIterator k_tile_iter, int k_tile_count,
                           int thread_idx, uint32_t block_rank_in_cluster, TensorStorage& shared_tensors) {
    (void)thread_idx;
    (void)block_rank_in_cluster;
    static_assert(size(ClusterShape{}) == 1, "no multicast");
    int lane_predicate = cute::elect_one_sync();
    if (!lane_predicate) return;
    Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), typename Base::SmemLayoutB{});
    auto block_tma_b = p.tma_load_b.get_slice(0);
    auto [m_coord, n_coord, k_coord, l_coord] = blk_coord;
    auto gate_up_loads = p.tma_load_gate_up.tile_loads(0, get<0>(load_inputs)(_, _, m_coord, _, l_coord),  // (BH, BK, k)
                                                       get<1>(load_inputs)(_, _, m_coord, _, l_coord),
                                                       shared_tensors.smem_A.data());
    Tensor gB = get<2>(load_inputs)(_, _, n_coord, _, l_coord);  // (BN, BK, k)
    Tensor tBgB = block_tma_b.partition_S(gB);
    Tensor tBsB = block_tma_b.partition_D(sB);
    // k-tile k into stage `stage`, on the stage's transaction barrier:
    auto issue = [&](auto& barrier, int k, int stage) {
      // The weights are read once: evict-first keeps L2 for h and the down projection.
      p.tma_load_gate_up.copy(gate_up_loads, barrier, 0, TMA::CacheHintSm90::EVICT_FIRST, k, stage);
      copy(p.tma_load_b.with(barrier, 0), tBgB(_, _, _, k), tBsB(_, _, _, stage));
    };
    tma_producer::for_each_k_tile(pipeline, smem_pipe_write, k_tile_iter, k_tile_count, issue);
  }
  // The consumer is the stock one (Base::mma, not overridden): it reads only the stock
  // Params these extend.
};

// Epilogue, register level: accumulator rows [0, 64) are the gate, [64, 128) the up of
// the same units (MMA_M index 0 and 1 of the same fragment element); the output is
// transposed (out[token][unit]), one 2-byte store per value.
template <class Element>
struct SwapAbArguments {
  Element* ptr_out = nullptr;
  int64_t ldo = 0;
  Element const* bias_g = nullptr;
  Element const* bias_u = nullptr;
  int approximate = 1;
};

template <class Element>
class SwapAbEpilogue : public sm90_epilogue::RegisterEpilogue<SwapAbEpilogue<Element>,
                                                              Element, SwapAbArguments<Element>,
                                                              sm90_epilogue::StrideTransposed> {
  using SwapAbEpilogue::RegisterEpilogue::params;

 public:
  using SwapAbEpilogue::RegisterEpilogue::RegisterEpilogue;
  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class Accumulators, class TiledMma>
  CUTLASS_DEVICE void store_tile(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK, BlockCoordMNKL blk_coord_mnkl,
                                 Accumulators const& acc, TiledMma tiled_mma, int thread_idx) {
    if (params.approximate) {
      apply<true>(problem_shape_mnkl, blk_coord_mnkl, acc, tiled_mma, thread_idx);
    } else {
      apply<false>(problem_shape_mnkl, blk_coord_mnkl, acc, tiled_mma, thread_idx);
    }
  }

 private:
  template <bool kTanh, class ProblemShapeMNKL, class BlockCoordMNKL, class FrgEngine, class FrgLayout,
            class TiledMma>
  CUTLASS_DEVICE void apply(ProblemShapeMNKL problem_shape_mnkl, BlockCoordMNKL blk_coord_mnkl,
                            cute::Tensor<FrgEngine, FrgLayout> const& acc, TiledMma tiled_mma, int thread_idx) {
    static_assert(rank(FrgLayout{}) == 3, "accumulator (V, MMA_M, MMA_N)");
    static_assert(size<1>(FrgLayout{}) == 2, "two m64 atoms: gate rows, then up rows");
    static_assert(size<2>(FrgLayout{}) == 1, "one atom spans the N tile");
    constexpr int BM = 128, BN = 8 * size<0, 2>(FrgLayout{});
    const int H = int(get<0>(problem_shape_mnkl)) / 2;
    const int M = int(get<1>(problem_shape_mnkl));
    const int h0 = int(get<0>(blk_coord_mnkl)) * (BM / 2);
    const int n0 = int(get<1>(blk_coord_mnkl)) * BN;
    auto thr_mma = tiled_mma.get_thread_slice(thread_idx);
    Tensor cT = make_identity_tensor(make_shape(Int<BM>{}, Int<BN>{}));
    Tensor tC = thr_mma.partition_C(cT);
    Element* __restrict__ out = params.ptr_out;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size<0>(FrgLayout{}); ++i) {
      const int h = h0 + int(get<0>(tC(i, 0, 0)));
      const int n = n0 + int(get<1>(tC(i, 0, 0)));
      if (h < H && n < M) {
        float g = acc(i, 0, 0), u = acc(i, 1, 0);
        if (params.bias_g) g += float(params.bias_g[h]);
        if (params.bias_u) u += float(params.bias_u[h]);
        out[int64_t(n) * params.ldo + h] = Element(geglu_cuda::gelu<kTanh>(g) * u);
      }
    }
  }
};

// 16 tokens per tile: the op takes it up to 32 tokens; at 64 the engine's tile wins
// (docs/DESIGN.md, "The swap-AB gate/up").
template <class Element>
struct SwapAbGemm {
  using Epilogue = SwapAbEpilogue<Element>;
  using CollectiveEpilogue = cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<Epilogue>;
  // A = W [2H, K] (two halves), B = x [M, K].
  using MainloopBase = swapab_collective::Mainloop<
      Element, static_cast<int>(sizeof(typename CollectiveEpilogue::TensorStorage))>;
  using Mainloop = SwapAbMainloop<MainloopBase>;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, CollectiveEpilogue,
                                                      cutlass::gemm::PersistentScheduler>;
};

}  // namespace geglu_swapab
