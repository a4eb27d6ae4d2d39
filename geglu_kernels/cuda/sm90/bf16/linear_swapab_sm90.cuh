#pragma once
// The down projection for a few tokens on Hopper (sm_90a), swap-AB with K split: CUTLASS
// 3.x collectives and the kernel type (linear_swapab_sm90.cu has the C launcher,
// linear_swapab_sm90.h the ABI; mlp_fused_sm90.cu runs the same mainloop and epilogue as
// the decode MLP's second half).
//
//   out[m, n] = x[m] . W[n] + bias[n] + residual[m, n]
//
// A decode step's down projection is a weight read with few output rows (Gemma-7B: 3072
// rows of 24576, 151 MB for 0.1 GFLOP per token): 24 tiles of 128 rows for 132 SMs. The
// GEMM CUTLASS sees has the weights on the wgmma's 128-row side and the tokens on the
// 16-wide one, and K cut into S splits that ride on the batch mode: problem (N, M, K / S, S).
// - Mainloop (SplitKMainloop): the stock sm90 warp-specialized TMA mainloop; load_init
//   views the whole W and x as (tile, k-tile of a split, split), so split l reads k-tiles
//   [l * kps, (l + 1) * kps) (the last split's tiles past K are zero-filled by TMA: S need
//   not divide K). The weights are loaded evict-first: read once, they would push the
//   partial sums out of L2 before the last unit reads them (Gemma-7B, 16 tokens: 43.0
//   against 47.4 us with the default policy).
// - Pingpong schedule, 128 x 16 x 64 tile, persistent over (row tiles x token tiles x S)
//   work units; S is picked per shape so that the units fill the SMs evenly
//   (choose_splits).
// - Epilogue (SplitKEpilogue), register level: each unit writes its float32 sums to the
//   caller's workspace [S][M][N] and counts itself in its tile's arrival counter; the
//   unit that arrives last adds the S partials in split order (the same sum on every
//   call, whichever unit is last), the bias and the residual, rounds once, writes the
//   output and sets the counter back to 0. A second kernel for that sum cost ~3 us of
//   Gemma-7B's ~41 (the launch gap: the GEMM holds every SM's registers to its end).
// Measured against cuBLAS's addmm and the decode linear (tools/sm90_gemm/
// check_linear_swapab.py): docs/DESIGN.md, "The split-K swap-AB down projection".

#include <cstdint>

#include "cutlass/cutlass.h"
#include "cutlass/gemm/gemm.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "cute/tensor.hpp"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/epilogue/collective/detail.hpp"

#include "sm90/common/register_epilogue.cuh"
#include "sm90/bf16/swapab_collective.cuh"
#include "sm90/common/tma_producer.cuh"

namespace linear_swapab {

using namespace cute;

constexpr int kTileRows = 128, kTileTokens = 16, kTileK = 64;
constexpr int kMaxSplits = 32;

// Mainloop: the stock one, A = W [N, K] and B = x [M, K] read whole (one TMA descriptor
// each, built over the real K), unit (m, n, l) reading split l's k-tiles.
template <class Base>
struct SplitKMainloop : Base {
  using typename Base::TileShape;
  using typename Base::ElementA;
  using typename Base::ElementB;
  using typename Base::StrideA;
  using typename Base::StrideB;
  using typename Base::MainloopPipeline;
  using typename Base::PipelineState;
  using typename Base::TensorStorage;
  using typename Base::InternalElementA;
  using typename Base::InternalElementB;
  using ClusterShape = typename Base::DispatchPolicy::ClusterShape;

  struct Arguments {
    ElementA const* ptr_A;  // W [N, K]
    StrideA dA;
    ElementB const* ptr_B;  // x [M, K]
    StrideB dB;
    int K;                  // the whole K (the problem's K is one split's)
  };

  struct Params : Base::Params {
    int K = 0;
  };

  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args, void*) {
    auto [N, M, Ks, S] = problem_shape;
    (void)Ks;
    (void)S;
    auto ptr_A = reinterpret_cast<InternalElementA const*>(args.ptr_A);
    auto ptr_B = reinterpret_cast<InternalElementB const*>(args.ptr_B);
    Tensor tensor_a = make_tensor(ptr_A, make_layout(make_shape(N, args.K, 1), args.dA));
    Tensor tensor_b = make_tensor(ptr_B, make_layout(make_shape(M, args.K, 1), args.dB));
    Params p;
    p.tma_load_a = make_tma_copy_A_sm90(typename Base::GmemTiledCopyA{}, tensor_a,
                                        typename Base::SmemLayoutA{}(_, _, Int<0>{}), TileShape{}, ClusterShape{});
    p.tma_load_b = make_tma_copy_B_sm90(typename Base::GmemTiledCopyB{}, tensor_b,
                                        typename Base::SmemLayoutB{}(_, _, Int<0>{}), TileShape{}, ClusterShape{});
    tma_producer::set_stage_transaction_bytes<Base>(p);
    p.K = args.K;
    return p;
  }

  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const&) {
    return true;  // the launcher checks alignment
  }

  // A tiled tensor (rows, BK, row tiles, k-tiles of the whole K, 1) seen as (rows, BK, row
  // tiles, k-tiles per split, splits): split l's k-tile j is the whole K's k-tile
  // l * per_split + j (past K for the last split's spare tiles: zero-filled by TMA).
  template <class Tiled>
  CUTLASS_DEVICE static auto split_k(Tiled const& g, int per_split, int splits) {
    return make_tensor(g.data(), make_layout(make_shape(shape<0>(g), shape<1>(g), shape<2>(g), per_split, splits),
                                             make_stride(stride<0>(g), stride<1>(g), stride<2>(g), stride<3>(g),
                                                         stride<3>(g) * per_split)));
  }

  // Returns (gA_mkl, gB_nkl): (BM, BK, m, k, l) and (BN, BK, n, k, l), k the k-tiles of one
  // split, l the split (the kernel takes its k-tile count from mode 3 of gA).
  template <class ProblemShape_MNKL>
  CUTLASS_DEVICE auto load_init(ProblemShape_MNKL const& problem_shape_MNKL, Params const& p) const {
    auto [N, M, Ks, S] = problem_shape_MNKL;
    const int per_split = int(Ks) / size<2>(TileShape{});
    Tensor gA = tma_producer::tiled<tma_producer::Operand::A, TileShape>(p.tma_load_a, make_shape(N, p.K, 1));
    Tensor gB = tma_producer::tiled<tma_producer::Operand::B, TileShape>(p.tma_load_b, make_shape(M, p.K, 1));
    return cute::make_tuple(split_k(gA, per_split, int(S)), split_k(gB, per_split, int(S)));
  }

  template <class TensorA, class TensorB, class KTileIterator, class BlockCoord>
  CUTLASS_DEVICE void load(Params const& p, MainloopPipeline pipeline, PipelineState smem_pipe_write,
                           cute::tuple<TensorA, TensorB> const& load_inputs, BlockCoord const& blk_coord,
                           KTileIterator k_tile_iter, int k_tile_count, int thread_idx,
                           uint32_t block_rank_in_cluster, TensorStorage& shared_tensors) {
    (void)thread_idx;
    (void)block_rank_in_cluster;
    static_assert(size(ClusterShape{}) == 1, "no multicast");
    int lane_predicate = cute::elect_one_sync();
    if (!lane_predicate) return;
    Tensor sA = make_tensor(make_smem_ptr(shared_tensors.smem_A.data()), typename Base::SmemLayoutA{});
    Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), typename Base::SmemLayoutB{});
    auto block_tma_a = p.tma_load_a.get_slice(0);
    auto block_tma_b = p.tma_load_b.get_slice(0);
    auto [m_coord, n_coord, k_coord, l_coord] = blk_coord;
    (void)k_coord;
    Tensor gA = get<0>(load_inputs)(_, _, m_coord, _, l_coord);  // (BM, BK, k)
    Tensor gB = get<1>(load_inputs)(_, _, n_coord, _, l_coord);  // (BN, BK, k)
    Tensor tAgA = block_tma_a.partition_S(gA);
    Tensor tAsA = block_tma_a.partition_D(sA);
    Tensor tBgB = block_tma_b.partition_S(gB);
    Tensor tBsB = block_tma_b.partition_D(sB);
    // k-tile k into stage `stage`, on the stage's transaction barrier:
    auto issue = [&](auto& barrier, int k, int stage) {
      copy(p.tma_load_a.with(barrier, 0, TMA::CacheHintSm90::EVICT_FIRST), tAgA(_, _, _, k), tAsA(_, _, _, stage));
      copy(p.tma_load_b.with(barrier, 0), tBgB(_, _, _, k), tBsB(_, _, _, stage));
    };
    tma_producer::for_each_k_tile(pipeline, smem_pipe_write, k_tile_iter, k_tile_count, issue);
  }
};

// The row stride of the partial sums: N rounded up to 4 floats (16-byte loads).
CUTLASS_HOST_DEVICE int partial_stride(int N) { return (N + 3) / 4 * 4; }

// Epilogue, register level: the unit's float32 sums to workspace[l][token][row]; the last
// unit of a tile to arrive reduces the tile (see the top).
template <class Element>
struct SplitKArguments {
  float* partials = nullptr;  // [S][M][partial_stride(N)]
  int* counters = nullptr;    // one per output tile, 0 between calls
  Element const* bias = nullptr;
  Element const* residual = nullptr;
  int64_t ldr = 0;
  Element* out = nullptr;
  int64_t ldo = 0;
};

template <class Element>
class SplitKEpilogue : public sm90_epilogue::RegisterEpilogue<SplitKEpilogue<Element>,
                                                              Element, SplitKArguments<Element>,
                                                              sm90_epilogue::StrideTransposed> {
  using SplitKEpilogue::RegisterEpilogue::params;

 public:
  using SplitKEpilogue::RegisterEpilogue::RegisterEpilogue;
  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class Accumulators, class TiledMma>
  CUTLASS_DEVICE void store_tile(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK, BlockCoordMNKL blk_coord_mnkl,
                                 Accumulators const& acc, TiledMma tiled_mma, int thread_idx) {
    constexpr int kThreads = 128;  // the consumer warpgroup that owns the tile
    static_assert(kTileRows == 4 * 32 && kTileTokens == 4 * (kThreads / 32), "the reduction's thread map");
    const int N = int(get<0>(problem_shape_mnkl));
    const int M = int(get<1>(problem_shape_mnkl));
    const int S = int(get<3>(problem_shape_mnkl));
    const int m_tile = int(get<0>(blk_coord_mnkl)), n_tile = int(get<1>(blk_coord_mnkl));
    const int r0 = m_tile * kTileRows, t0 = n_tile * kTileTokens;
    const int ldp = partial_stride(N);
    const int64_t MN = int64_t(M) * ldp;
    const int64_t l = int64_t(get<3>(blk_coord_mnkl));

    // 1. This unit's partial sums.
    auto thr_mma = tiled_mma.get_thread_slice(thread_idx);
    Tensor cT = make_identity_tensor(make_shape(Int<kTileRows>{}, Int<kTileTokens>{}));
    Tensor tC = thr_mma.partition_C(cT);
    static_assert(decltype(size(tC))::value == decltype(size(acc))::value, "one coordinate per accumulator");
    float* __restrict__ mine = params.partials + l * MN;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size(acc); ++i) {
      const int r = r0 + int(get<0>(tC(i)));
      const int t = t0 + int(get<1>(tC(i)));
      if (r < N && t < M) mine[int64_t(t) * ldp + r] = acc(i);
    }

    // 2. Arrive (the pattern of CUTLASS's split-K semaphore, no full fence): the warpgroup's
    //    barrier orders its stores before thread 0's release-acquire increment, which
    //    orders the other units' stores before this unit's loads; the warpgroup learns
    //    from thread 0 whether it came last.
    const uint32_t barrier_id = uint32_t(cutlass::arch::ReservedNamedBarriers::FirstUserBarrier) +
                                uint32_t(threadIdx.x / kThreads) % 4;  // one per warpgroup
    cutlass::arch::NamedBarrier::sync(kThreads, barrier_id);
    int* counter = params.counters + int64_t(n_tile) * ((N + kTileRows - 1) / kTileRows) + m_tile;
    uint32_t last = 0;
    if (thread_idx == 0) {
      int arrived;
      asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], 1;" : "=r"(arrived) : "l"(counter) : "memory");
      last = arrived == S - 1;
    }
    asm volatile(
        "{\n .reg .pred p, q;\n setp.ne.u32 p, %1, 0;\n barrier.red.or.pred q, %2, %3, p;\n"
        " selp.u32 %0, 1, 0, q;\n}\n"
        : "=r"(last)
        : "r"(last), "r"(barrier_id), "r"(kThreads)
        : "memory");
    if (!last) return;

    // 3. The last unit: thread (q, c) sums rows r0 + 4c .. 4c + 3 for tokens t0 + 4q .. 4q + 3,
    //    splits in order, with 16-byte loads through L2 (where the other SMs' partials
    //    are; rows padded to ldp keep them aligned), kBatch splits in flight.
    if (thread_idx == 0) *counter = 0;  // the next call starts from 0 (it runs after this kernel)
    const int q = thread_idx / 32, c = thread_idx % 32;
    const int r = r0 + 4 * c, tq = 4 * q;
    const int tokens = min(kTileTokens, M - t0) - tq;  // this thread's, up to 4
    if (r >= N || tokens <= 0) return;
    constexpr int kBatch = 6;  // 8 spills
    float4 sum[4];
    CUTLASS_PRAGMA_UNROLL
    for (int t = 0; t < 4; ++t) sum[t] = make_float4(0.f, 0.f, 0.f, 0.f);
    const float* __restrict__ base = params.partials + int64_t(t0 + tq) * ldp + r;
    for (int l0 = 0; l0 < S; l0 += kBatch) {
      float4 v[kBatch][4];
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < kBatch; ++j) {
        CUTLASS_PRAGMA_UNROLL
        for (int t = 0; t < 4; ++t) {
          if (l0 + j < S && t < tokens) {
            v[j][t] = __ldcg(reinterpret_cast<const float4*>(base + (l0 + j) * MN + t * ldp));
          }
        }
      }
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < kBatch; ++j) {
        CUTLASS_PRAGMA_UNROLL
        for (int t = 0; t < 4; ++t) {
          if (l0 + j < S && t < tokens) {
            sum[t].x += v[j][t].x, sum[t].y += v[j][t].y, sum[t].z += v[j][t].z, sum[t].w += v[j][t].w;
          }
        }
      }
    }
    float bias[4] = {0.f, 0.f, 0.f, 0.f};
    if (params.bias != nullptr) {
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < 4; ++i) bias[i] = r + i < N ? float(params.bias[r + i]) : 0.f;
    }
    CUTLASS_PRAGMA_UNROLL
    for (int t = 0; t < 4; ++t) {
      if (t < tokens) {
        const int64_t row = t0 + tq + t;
        const float y[4] = {sum[t].x, sum[t].y, sum[t].z, sum[t].w};
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < 4; ++i) {
          if (r + i < N) {
            float o = y[i] + bias[i];
            if (params.residual != nullptr) o += float(params.residual[row * params.ldr + r + i]);
            params.out[row * params.ldo + r + i] = Element(o);
          }
        }
      }
    }
  }
};

template <class Element>
struct SplitKGemm {
  static_assert(cute::is_same_v<swapab_collective::TileShape, Shape<Int<kTileRows>, Int<kTileTokens>, Int<kTileK>>>,
                "the epilogue's thread map and choose_splits assume the collective's tile");
  using Epilogue = SplitKEpilogue<Element>;
  using CollectiveEpilogue = cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<Epilogue>;
  // A = W [N, K], B = x [M, K].
  using MainloopBase = swapab_collective::Mainloop<
      Element, static_cast<int>(sizeof(typename CollectiveEpilogue::TensorStorage))>;
  using Mainloop = SplitKMainloop<MainloopBase>;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, CollectiveEpilogue,
                                                      cutlass::gemm::PersistentScheduler>;
};

// The float32 partial sums of `splits` splits: [splits][M][partial_stride(N)].
inline int64_t partials_bytes(int splits, int64_t M, int64_t N) {
  return int64_t(splits) * M * partial_stride(int(N)) * int64_t(sizeof(float));
}

}  // namespace linear_swapab
