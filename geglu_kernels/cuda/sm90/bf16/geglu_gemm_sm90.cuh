#pragma once
// Collectives for the fused GeGLU GEMM on Hopper (sm_90a):
//
//   out[M, H] = gelu(x @ Wg^T + bg) * (x @ Wu^T + bu)
//
// One CUTLASS 3.x warp-specialized persistent kernel (Pingpong or Cooperative) whose
// CTA tile has N = 2*BN accumulator columns: columns [0, BN) hold x @ Wg[h0:h0+BN]^T
// and columns [BN, 2BN) hold x @ Wu[h0:h0+BN]^T, for the output columns
// [h0, h0+BN). One wgmma accumulator (N = 2*BN <= 256) carries both halves.
//
// Mainloop (GegluMainloopSm90): the stock sm90 TMA/wgmma warp-specialized mainloop
// (its smem layouts, pipeline and consumer loop are reused as they are), with the B
// operand read through two TMA descriptors, one over Wg [H, K] and one over Wu [H, K]
// (any two 16-byte-aligned pointers: a merged [2H, K] weight is Wu = Wg + H*ldw). Each
// k-step the producer issues three TMA loads into one pipeline stage: the A tile, the
// gate rows into smem B rows [0, BN) and the up rows into smem B rows [BN, 2BN). Rows
// past H are zero-filled by TMA (per descriptor), so H needs no alignment to the tile.
//
// Epilogue (GegluEpilogue): register-level, after the model of
// cutlass::epilogue::collective::DefaultEpilogue, wrapped for the warp-specialized
// kernels by Sm90TmaWarpSpecializedAdapter. In the sm90 wgmma accumulator layout each
// thread holds every 8-column block of the tile's N, so the gate value of column n and
// the up value of column n + BN sit in the same thread: gelu(gate + bg) * (up + bu) is
// formed in float32 in registers, packed to bf16/fp16 pairs, transposed across the
// quad of threads that shares a row (shuffles) and written 8 columns (16 B) per store.
// With kGated = false the same epilogue computes gelu(acc + bias) for every column of
// the tile: the bias + GELU linear (linear_gelu_sm90.cu) on the stock mainloop.
//
// Kernel (GegluGemm): the persistent GemmUniversal over the two; the variants the
// product compiles and the shape pick that chooses among them (GEGLU_SM90_PRODUCT_VARIANTS,
// pick_variant) are at the end. The tuner (tools/sm90_gemm/geglu_gemm_sm90_tuning.cu)
// builds more variants from the same pieces.

#include <cstdint>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/numeric_types.h"
#include "cutlass/numeric_conversion.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "cutlass/epilogue/collective/detail.hpp"

#include "sm90/common/gate_up_tma.cuh"
#include "activation/gelu_math.cuh"
#include "sm90/common/register_epilogue.cuh"
#include "sm90/common/tma_producer.cuh"

namespace geglu_sm90 {

using namespace cute;

// ---------------------------------------------------------------------------------
// Mainloop: stock sm90 warp-specialized TMA mainloop, B from two descriptors.
// ---------------------------------------------------------------------------------
template <class Base, int BN>
struct GegluMainloopSm90 : Base {
  using typename Base::TileShape;
  using typename Base::ElementA;
  using typename Base::ElementB;
  using typename Base::StrideA;
  using typename Base::StrideB;
  using typename Base::DispatchPolicy;
  using typename Base::SmemLayoutA;
  using typename Base::GmemTiledCopyA;
  using typename Base::GmemTiledCopyB;
  using typename Base::MainloopPipeline;
  using typename Base::PipelineState;
  using typename Base::TensorStorage;
  using typename Base::InternalElementA;
  using typename Base::InternalElementB;
  using ClusterShape = typename DispatchPolicy::ClusterShape;

  static constexpr int BM = size<0>(TileShape{});
  static constexpr int BK = size<2>(TileShape{});
  static_assert(size<1>(TileShape{}) == 2 * BN, "CTA N tile must be gate block + up block");
  static_assert(BN % 16 == 0, "half tile must keep the 128B swizzle period");

  using TileShapeHalf = Shape<Int<BM>, Int<BN>, Int<BK>>;
  using WeightTma = gate_up_tma::GateUpTma<tma_producer::Operand::B, Base, InternalElementB, TileShapeHalf>;

  struct Arguments {
    ElementA const* ptr_A;
    StrideA dA;
    ElementB const* ptr_Bg;  // gate weight [H, K], row stride get<0>(dB)
    ElementB const* ptr_Bu;  // up weight   [H, K], same strides
    StrideB dB;
  };

  // Inherits the stock Params (its TMA_A, transaction byte counts; its TMA_B is unused)
  // so that the stock consumer (Base::mma, not overridden) takes them as they are.
  struct Params : Base::Params {
    WeightTma tma_load_gate_up;
  };

  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args,
                                        void* workspace) {
    (void)workspace;
    auto problem_shape_MNKL = append<4>(problem_shape, 1);
    auto [M, N, K, L] = problem_shape_MNKL;
    auto H = N / 2;  // problem N is 2H: gate and up columns of the accumulator
    auto ptr_A = reinterpret_cast<InternalElementA const*>(args.ptr_A);
    Tensor tensor_a = make_tensor(ptr_A, make_layout(make_shape(M, K, L), args.dA));
    Params p;
    p.tma_load_a = make_tma_copy_A_sm90(GmemTiledCopyA{}, tensor_a, SmemLayoutA{}(_, _, Int<0>{}),
                                        TileShape{}, ClusterShape{});
    p.tma_load_gate_up = WeightTma::make(reinterpret_cast<InternalElementB const*>(args.ptr_Bg),
                                   reinterpret_cast<InternalElementB const*>(args.ptr_Bu), make_shape(H, K, L), args.dB);
    tma_producer::set_stage_transaction_bytes<Base>(p);  // B's: both halves together
    return p;
  }

  template <class ProblemShape>
  static bool can_implement(ProblemShape const& problem_shape, Arguments const& args) {
    // The launcher checks alignment (16 B pointers and row strides) before this.
    (void)problem_shape;
    (void)args;
    return true;
  }

  CUTLASS_DEVICE
  static void prefetch_tma_descriptors(Params const& p) {
    cute::prefetch_tma_descriptor(p.tma_load_a.get_tma_descriptor());
    p.tma_load_gate_up.prefetch();
  }

  // Returns (gA_mkl, gBg_nkl, gBu_nkl). The kernel reads only the n and l extents of
  // the second: ceil(H / BN) n tiles, equal to the scheduler's ceil(2H / 2BN).
  template <class ProblemShape_MNKL>
  CUTLASS_DEVICE auto load_init(ProblemShape_MNKL const& problem_shape_MNKL, Params const& p) const {
    auto [M, N, K, L] = problem_shape_MNKL;
    auto H = N / 2;
    auto [gBg_nkl, gBu_nkl] = p.tma_load_gate_up.tiles(make_shape(H, K, L));
    return cute::make_tuple(tma_producer::tiled<tma_producer::Operand::A, TileShape>(p.tma_load_a, make_shape(M, K, L)),
                            gBg_nkl, gBu_nkl);
  }

  // Producer: per k tile, A into stage A, gate rows into B rows [0, BN), up rows into
  // B rows [BN, 2BN) of the same stage, all three on the stage's transaction barrier.
  template <class TensorA, class TensorBg, class TensorBu, class KTileIterator, class BlockCoord>
  CUTLASS_DEVICE void load(Params const& p, MainloopPipeline pipeline, PipelineState smem_pipe_write,
                           cute::tuple<TensorA, TensorBg, TensorBu> const& load_inputs,
                           BlockCoord const& blk_coord, KTileIterator k_tile_iter, int k_tile_count,
                           int thread_idx, uint32_t block_rank_in_cluster,
                           TensorStorage& shared_tensors) {
    (void)thread_idx;
    int lane_predicate = cute::elect_one_sync();
    if (!lane_predicate) return;

    Tensor sA = make_tensor(make_smem_ptr(shared_tensors.smem_A.data()), SmemLayoutA{});

    constexpr uint32_t cluster_shape_x = get<0>(ClusterShape());
    uint2 cluster_local_block_id = {block_rank_in_cluster % cluster_shape_x,
                                    block_rank_in_cluster / cluster_shape_x};

    auto block_tma_a = p.tma_load_a.get_slice(cluster_local_block_id.y);

    auto [m_coord, n_coord, k_coord, l_coord] = blk_coord;
    Tensor gA = get<0>(load_inputs)(_, _, m_coord, _, l_coord);   // (BM, BK, k)
    Tensor tAgA = block_tma_a.partition_S(gA);
    Tensor tAsA = block_tma_a.partition_D(sA);
    auto gate_up_loads = p.tma_load_gate_up.tile_loads(cluster_local_block_id.x,
                                           get<1>(load_inputs)(_, _, n_coord, _, l_coord),   // (BN, BK, k)
                                           get<2>(load_inputs)(_, _, n_coord, _, l_coord),   // (BN, BK, k)
                                           shared_tensors.smem_B.data());

    uint16_t mcast_mask_a = 0;
    uint16_t mcast_mask_b = 0;
    if constexpr (cute::is_same_v<GmemTiledCopyA, SM90_TMA_LOAD_MULTICAST>) {
      auto block_layout = Layout<ClusterShape>{};
      for (int n = 0; n < size<1>(block_layout); ++n) {
        mcast_mask_a |= (uint16_t(1) << block_layout(cluster_local_block_id.x, n, Int<0>{}));
      }
    }
    if constexpr (cute::is_same_v<GmemTiledCopyB, SM90_TMA_LOAD_MULTICAST>) {
      auto block_layout = Layout<ClusterShape>{};
      for (int m = 0; m < size<0>(block_layout); ++m) {
        mcast_mask_b |= (uint16_t(1) << block_layout(m, cluster_local_block_id.y, Int<0>{}));
      }
    }

    // k-tile k into stage `stage`, on the stage's transaction barrier:
    auto issue = [&](auto& barrier, int k, int stage) {
      copy(p.tma_load_a.with(barrier, mcast_mask_a), tAgA(_, _, _, k), tAsA(_, _, _, stage));
      p.tma_load_gate_up.copy(gate_up_loads, barrier, mcast_mask_b, TMA::CacheHintSm90::EVICT_NORMAL, k, stage);
    };
    tma_producer::for_each_k_tile(pipeline, smem_pipe_write, k_tile_iter, k_tile_count, issue);
  }
};

// ---------------------------------------------------------------------------------
// Epilogue: gelu(gate + bg) * (up + bu) from one accumulator, register level; or,
// kGated = false, gelu(acc + bg) (bu unused). BN: output columns per tile.
// ---------------------------------------------------------------------------------
template <class Element>
struct GegluEpilogueArguments {
  Element* ptr_out = nullptr;
  int64_t ldo = 0;
  Element const* bias_g = nullptr;  // [H] or null (the bias when not gated)
  Element const* bias_u = nullptr;  // [H] or null (gated only)
  int approximate = 1;              // 1: tanh form, 0: exact (erf)
};

template <class Element, int BN, bool kGated = true>
class GegluEpilogue : public sm90_epilogue::RegisterEpilogue<GegluEpilogue<Element, BN, kGated>,
                                                             Element, GegluEpilogueArguments<Element>,
                                                             sm90_epilogue::StrideRowMajor> {
  using GegluEpilogue::RegisterEpilogue::params;

 public:
  using GegluEpilogue::RegisterEpilogue::RegisterEpilogue;
  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class Accumulators, class TiledMma>
  CUTLASS_DEVICE void store_tile(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK blk_shape_MNK,
                                 BlockCoordMNKL blk_coord_mnkl, Accumulators const& accumulators, TiledMma tiled_mma,
                                 int thread_idx) {
    const bool bias = params.bias_g != nullptr || (kGated && params.bias_u != nullptr);
    if (params.approximate) {
      if (bias) {
        apply<true, true>(problem_shape_mnkl, blk_shape_MNK, blk_coord_mnkl, accumulators, tiled_mma, thread_idx);
      } else {
        apply<true, false>(problem_shape_mnkl, blk_shape_MNK, blk_coord_mnkl, accumulators, tiled_mma, thread_idx);
      }
    } else {
      if (bias) {
        apply<false, true>(problem_shape_mnkl, blk_shape_MNK, blk_coord_mnkl, accumulators, tiled_mma, thread_idx);
      } else {
        apply<false, false>(problem_shape_mnkl, blk_shape_MNK, blk_coord_mnkl, accumulators, tiled_mma, thread_idx);
      }
    }
  }

 private:
  template <bool kTanh, bool kBias, class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL,
            class FrgEngine, class FrgLayout, class TiledMma>
  CUTLASS_DEVICE void apply(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK,
                            BlockCoordMNKL blk_coord_mnkl,
                            cute::Tensor<FrgEngine, FrgLayout> const& acc, TiledMma tiled_mma,
                            int thread_idx) {
    constexpr int BM = size<0>(BlockShapeMNK{});
    constexpr int kTileN = kGated ? 2 * BN : BN;  // accumulator columns
    static_assert(size<1>(BlockShapeMNK{}) == kTileN, "tile N is gate block + up block (gated) or BN");
    // wgmma accumulator fragment: ((2, 2, N_atom/8), MMA_M, MMA_N); one atom spans the
    // whole tile N, so 8-column block j (gate) and j + BN/8 (up) are in this thread.
    static_assert(rank(FrgLayout{}) == 3, "accumulator (V, MMA_M, MMA_N)");
    static_assert(size<2>(FrgLayout{}) == 1, "one wgmma atom must span the N tile");
    static_assert(size<0, 0>(FrgLayout{}) == 2 && size<0, 1>(FrgLayout{}) == 2, "sm90 C fragment");
    static_assert(size<0, 2>(FrgLayout{}) == kTileN / 8, "sm90 C fragment");
    constexpr int NB = BN / 8;
    constexpr int MM = size<1>(FrgLayout{});

    const int M = int(get<0>(problem_shape_mnkl));
    const int H = int(get<1>(problem_shape_mnkl)) / (kGated ? 2 : 1);
    auto m_coord = get<0>(blk_coord_mnkl);
    auto n_coord = get<1>(blk_coord_mnkl);
    const int m0 = int(m_coord) * BM;
    const int h0 = int(n_coord) * BN;

    auto thr_mma = tiled_mma.get_thread_slice(thread_idx);
    Tensor cT = make_identity_tensor(make_shape(Int<BM>{}, Int<kTileN>{}));
    Tensor tC = thr_mma.partition_C(cT);  // tile coordinates of each accumulator

    static_assert(NB % 4 == 0, "quad transpose works on groups of 4 column blocks");
    const int t = thread_idx & 3;  // position in the quad that shares a row
    Element* __restrict__ out = params.ptr_out;
    const int64_t ldo = params.ldo;

    // Bias pairs for this thread's columns h0 + 8j + 2t (+1), loaded once per tile, all
    // loads in flight together (packed: 2 x 16 bit per register).
    uint32_t bgp[NB], bup[kGated ? NB : 1];
    if constexpr (kBias) {
      sm90_epilogue::load_bias_pairs<NB>(params.bias_g, h0 + 2 * t, H, bgp);
      if constexpr (kGated) sm90_epilogue::load_bias_pairs<NB>(params.bias_u, h0 + 2 * t, H, bup);
    }

    CUTLASS_PRAGMA_UNROLL
    for (int mm = 0; mm < MM; ++mm) {
      CUTLASS_PRAGMA_UNROLL
      for (int r = 0; r < 2; ++r) {
        const int row = m0 + int(get<0>(tC(make_coord(0, r, 0), mm, 0)));
        CUTLASS_PRAGMA_UNROLL
        for (int q = 0; q < NB / 4; ++q) {
          // p[jj]: outputs of columns 8(4q+jj) + 2t, +1 (packed)
          uint32_t p[4];
          CUTLASS_PRAGMA_UNROLL
          for (int jj = 0; jj < 4; ++jj) {
            const int j = 4 * q + jj;
            float g0 = acc(make_coord(0, r, j), mm, 0);
            float g1 = acc(make_coord(1, r, j), mm, 0);
            if constexpr (kBias) {
              const float2 bgv = sm90_epilogue::unpack2<Element>(bgp[j]);
              g0 += bgv.x;
              g1 += bgv.y;
            }
            if constexpr (kGated) {
              float u0 = acc(make_coord(0, r, j + NB), mm, 0);
              float u1 = acc(make_coord(1, r, j + NB), mm, 0);
              if constexpr (kBias) {
                const float2 buv = sm90_epilogue::unpack2<Element>(bup[j]);
                u0 += buv.x;
                u1 += buv.y;
              }
              p[jj] = sm90_epilogue::pack2<Element>(geglu_cuda::gelu_ex2_rcp<kTanh>(g0) * u0,
                                                 geglu_cuda::gelu_ex2_rcp<kTanh>(g1) * u1);
            } else {
              p[jj] = sm90_epilogue::pack2<Element>(geglu_cuda::gelu_ex2_rcp<kTanh>(g0), geglu_cuda::gelu_ex2_rcp<kTanh>(g1));
            }
          }
          // 4x4 transpose across the quad: thread t then holds the 8 consecutive
          // outputs of column block 4q + t, one 16-byte store.
          sm90_epilogue::quad_transpose(p, t);
          const int col = h0 + 8 * (4 * q + t);
          if (row < M) {
            Element* dst = out + int64_t(row) * ldo + col;
            if (col + 8 <= H) {
              *reinterpret_cast<uint4*>(dst) = make_uint4(p[0], p[1], p[2], p[3]);
            } else {
              CUTLASS_PRAGMA_UNROLL
              for (int e = 0; e < 8; ++e) {
                if (col + e < H) {
                  uint16_t bits = uint16_t(p[e / 2] >> (16 * (e % 2)));
                  *reinterpret_cast<uint16_t*>(dst + e) = bits;
                }
              }
            }
          }
        }
      }
    }
  }
};

// ---------------------------------------------------------------------------------
// Kernel: the persistent warp-specialized GemmUniversal over the mainloop and epilogue
// above. BN = output columns per tile (the wgmma N is 2*BN). EpilogueOp: GegluEpilogue,
// or a tool's wrapper of it.
// ---------------------------------------------------------------------------------
template <class Element, int BM, int BN, class Schedule, int ClusterM, int ClusterN = 1,
          class EpilogueOp = GegluEpilogue<Element, BN>>
struct GegluGemm {
  static constexpr int kBN = BN;
  using TileShape = Shape<Int<BM>, Int<2 * BN>, Int<64>>;
  using ClusterShape = Shape<Int<ClusterM>, Int<ClusterN>, _1>;
  using Epilogue = EpilogueOp;
  using CollectiveEpilogue = cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<Epilogue>;
  using MainloopBase = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
      Element, cutlass::layout::RowMajor, 8,     // A = x [M, K], K contiguous
      Element, cutlass::layout::ColumnMajor, 8,  // B = W [N, K], K contiguous
      float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<
          static_cast<int>(sizeof(typename CollectiveEpilogue::TensorStorage))>,
      Schedule>::CollectiveOp;
  using Mainloop = GegluMainloopSm90<MainloopBase, BN>;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop,
                                                      CollectiveEpilogue,
                                                      cutlass::gemm::PersistentScheduler>;
  using Params = typename Kernel::Params;
};

using cutlass::gemm::KernelTmaWarpSpecializedCooperative;
using cutlass::gemm::KernelTmaWarpSpecializedPingpong;

// The variants the product compiles: X(id, name, BM, BN, schedule, cluster M[, cluster N]).
#define GEGLU_SM90_PRODUCT_VARIANTS(X)                                                         \
  X(0, "pingpong_64x(2x128)x64_c1", 64, 128, KernelTmaWarpSpecializedPingpong, 1)              \
  X(1, "coop_128x(2x128)x64_c2", 128, 128, KernelTmaWarpSpecializedCooperative, 2)             \
  X(2, "pingpong_128x(2x64)x64_c2", 128, 64, KernelTmaWarpSpecializedPingpong, 2)              \
  X(3, "pingpong_64x(2x64)x64_c1", 64, 64, KernelTmaWarpSpecializedPingpong, 1)

// A variant with the tile scheduler's settings for it.
struct VariantPick {
  int variant;  // an id of GEGLU_SM90_PRODUCT_VARIANTS
  int swizzle;  // max_swizzle_size: 1, 2, 4 or 8
  int raster;   // 0 heuristic, 1 along M, 2 along N
};

// The shape pick (H100 sweeps; the numbers: docs/DESIGN.md, "The Hopper engine's
// variants"):
// - M <= 64: 3, pingpong 64x(2x64): twice the tiles of 0, so the weight stream spreads
//   over more waves (these sizes are weight-read bound);
// - M <= 128: 0, pingpong 64x(2x128): the fewest wasted rows, the most CTAs along N;
// - x larger than ~20 MB: 1, cooperative 128x(2x128), cluster 2 (B multicast), raster
//   along N with swizzle 4: pingpong 128x(2x64) lost there, L2-bandwidth bound (its
//   tiles move more L2->SM bytes per flop, and x does not stay in L2);
// - otherwise 2, pingpong 128x(2x64), cluster 2 (the epilogue hidden behind the other
//   warpgroup's MMA).
inline VariantPick pick_variant(int64_t M, int64_t K, int64_t H) {
  (void)H;
  if (M <= 64) return {3, 1, 0};
  if (M <= 128) return {0, 1, 0};
  if (double(M) * double(K) * 2.0 > 20e6) return {1, 4, 2};
  return {2, 1, 0};
}

}  // namespace geglu_sm90
