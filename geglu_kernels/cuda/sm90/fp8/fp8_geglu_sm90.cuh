#pragma once
// Collectives of the block-scaled FP8 gate/up GEMM on Hopper (sm_90a):
//
//   h[M, H] = gelu(deq(xq) @ deq(Wg)^T) * (deq(xq) @ deq(Wu)^T),  written as e4m3 + scales
//
// Operands (all e4m3, K-major): xq [M, K] with one float32 scale per row and 128-column
// group (sx, stored M-major: sx[k / 128][m], row stride ld_sx); Wg, Wu [H, K] with one
// float32 scale per 128x128 block (sg, su [H / 128][K / 128], Transformers'
// `weight_scale_inv`). h leaves as e4m3 [M, H] with its own 1x128 group scales
// (sh[h / 128][m], the layout the down GEMM's A scales take).
//
// CTA tile BM x (128 gate + 128 up) x 128: one 128-column block of h per tile, so a
// row of the tile's h is exactly one quantization group and its scale is computed in
// registers (a max over the quad of threads that share the row). 64 rows per consumer
// warp group: Cooperative 128-row tiles (fp8_mlp_sm90.cu says why not Pingpong 64-row ones).
//
// Mainloop (Fp8GegluMainloopSm90): CUTLASS's blockwise-scaled FP8 mainloop
// (sm90_mma_tma_gmma_ss_warpspecialized_fp8_blockwise_scaling) with
// - B read through two TMA descriptors (gate rows into smem B rows [0, 128), up rows into
//   [128, 256): gate_up_tma.cuh, as in the bf16 engine's GegluMainloopSm90), and the B scales of each
//   half from its own tensor (the auxiliary load warp, cp.async);
// - its own consumer loop: per 128-deep K block, the gate half and then the up half are
//   each run as m64n128k32 wgmmas into one 64-register partial accumulator, which is
//   promoted into the float32 result with scale_x[row] * scale_w[half]. The stock loop
//   keeps a partial as large as the whole accumulator (2 x 128 registers a thread for
//   this tile, more than it has); a half-size partial holds 64 beside the 128.
//
// Epilogue (Fp8GegluEpilogue): register level. Each thread forms gelu(gate) * up for
// its 2 rows x 32 columns in float32, the row's amax over the quad (128 columns), scale
// = amax / 448 (1 for an all-zero row), h * (1 / scale) rounded to e4m3 (satfinite), 8 columns
// (8 bytes) per store after a transpose across the quad, and the scale by the quad's
// first thread.

#include <cstdint>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/numeric_types.h"
#include "cutlass/numeric_conversion.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/epilogue/collective/detail.hpp"

#include "sm90/common/gate_up_tma.cuh"
#include "sm90/fp8/fp8_convert.cuh"
#include "activation/gelu_math.cuh"
#include "sm90/common/register_epilogue.cuh"
#include "sm90/common/tma_producer.cuh"

namespace fp8_sm90 {

using namespace cute;

constexpr float kE4m3Max = 448.0f;

// ---------------------------------------------------------------------------------
// Mainloop
// ---------------------------------------------------------------------------------
template <class Base>
struct Fp8GegluMainloopSm90 : Base {
  using typename Base::TileShape;
  using typename Base::ElementA;
  using typename Base::ElementB;
  using typename Base::StrideA;
  using typename Base::StrideB;
  using typename Base::LayoutSFA;
  using typename Base::TiledMma;
  using typename Base::DispatchPolicy;
  using typename Base::SmemLayoutA;
  using typename Base::SmemLayoutB;
  using typename Base::SmemLayoutSFA;
  using typename Base::SmemLayoutSFB;
  using typename Base::GmemTiledCopyA;
  using typename Base::MainloopPipeline;
  using typename Base::PipelineState;
  using typename Base::TensorStorage;
  using ClusterShape = typename DispatchPolicy::ClusterShape;
  using ElementScale = float;

  static constexpr int BM = size<0>(TileShape{});
  static constexpr int BN = size<1>(TileShape{}) / 2;  // h columns per tile
  static constexpr int BK = size<2>(TileShape{});
  static constexpr int Stages = DispatchPolicy::Stages;
  static_assert(BN == 128 && BK == 128, "one 128-column h group and one 128-deep scale block per tile");
  static_assert(Base::ScaleGranularityM == 1 && Base::ScaleGranularityN == 128 && Base::ScaleGranularityK == 128,
                "1x128 activation scales, 128x128 weight scales");
  static_assert(Base::ScaleNsPerTile == 2 && Base::ScaleMsPerTile == BM, "scale slots per stage: 2 for B, BM for A");
  static_assert(Base::IsTmaLoadSFA && !Base::IsTmaLoadSFB, "A scales by TMA, B scales by the auxiliary warp");

  using TileShapeHalf = Shape<Int<BM>, Int<BN>, Int<BK>>;
  using WeightTma = gate_up_tma::GateUpTma<tma_producer::Operand::B, Base, ElementB, TileShapeHalf>;

  struct Arguments {
    ElementA const* ptr_A;
    StrideA dA;
    ElementB const* ptr_Bg;  // gate weight [H, K]
    ElementB const* ptr_Bu;  // up weight [H, K], same strides
    StrideB dB;
    ElementScale const* ptr_SFA;   // x scales, M-major
    LayoutSFA layout_SFA;
    ElementScale const* ptr_SFBg;  // gate scales [H/128, K/128]
    ElementScale const* ptr_SFBu;  // up scales, same layout
    int64_t ld_sfb;                // row stride of both (K/128 when contiguous)
  };

  // The stock Params (TMA for A and its scales, transaction byte counts; its TMA_B and
  // ptr_SFB are unused) and the two B descriptors and scale pointers.
  struct Params : Base::Params {
    WeightTma tma_load_gate_up;
    ElementScale const* ptr_SFBg;
    ElementScale const* ptr_SFBu;
    int64_t ld_sfb;
    int k_blocks;
  };

  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args, void*) {
    auto [M, N, K, L] = append<4>(problem_shape, 1);
    auto H = N / 2;
    Tensor tensor_a = make_tensor(args.ptr_A, make_layout(make_shape(M, K, L), args.dA));
    Tensor tensor_sfa = make_tensor(args.ptr_SFA, filter_zeros(args.layout_SFA));
    Params p;
    p.tma_load_a = make_tma_copy_A_sm90(GmemTiledCopyA{}, tensor_a, SmemLayoutA{}(_, _, Int<0>{}), TileShape{},
                                        ClusterShape{});
    p.tma_load_sfa = make_tma_copy(SM90_TMA_LOAD{}, tensor_sfa, filter_zeros(SmemLayoutSFA{})(_, _, Int<0>{}),
                                   Shape<Int<BM>, Int<1>>{}, _1{});
    p.tma_load_gate_up = WeightTma::make(args.ptr_Bg, args.ptr_Bu, make_shape(H, K, L), args.dB);
    p.tma_transaction_bytes = Base::TmaTransactionBytes;
    p.tma_transaction_bytes_mk = Base::TmaTransactionBytesMK;
    p.tma_transaction_bytes_nk = Base::TmaTransactionBytesNK;
    p.ptr_SFA = args.ptr_SFA;
    p.ptr_SFB = args.ptr_SFBg;
    p.layout_SFA = args.layout_SFA;
    p.ptr_SFBg = args.ptr_SFBg;
    p.ptr_SFBu = args.ptr_SFBu;
    p.ld_sfb = args.ld_sfb;
    p.k_blocks = int(K / BK);
    return p;
  }

  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const&) {
    return true;  // the launcher checks shapes (multiples of 128) and alignment first
  }

  CUTLASS_DEVICE
  static void prefetch_tma_descriptors(Params const& p) {
    cute::prefetch_tma_descriptor(p.tma_load_a.get_tma_descriptor());
    p.tma_load_gate_up.prefetch();
    cute::prefetch_tma_descriptor(p.tma_load_sfa.get_tma_descriptor());
  }

  // (gA_mkl, gBg_nkl, gBu_nkl, mSFA_mkl). The kernel reads the n extent of the second:
  // H / 128 n tiles, the scheduler's 2H / 256.
  template <class ProblemShape_MNKL>
  CUTLASS_DEVICE auto load_init(ProblemShape_MNKL const& problem_shape_MNKL, Params const& p) const {
    auto [M, N, K, L] = problem_shape_MNKL;
    auto H = N / 2;
    auto [gBg_nkl, gBu_nkl] = p.tma_load_gate_up.tiles(make_shape(H, K, L));
    Tensor mSFA_mkl = p.tma_load_sfa.get_tma_tensor(shape(filter_zeros(p.layout_SFA)));
    return cute::make_tuple(tma_producer::tiled<tma_producer::Operand::A, TileShape>(p.tma_load_a, make_shape(M, K, L)),
                            gBg_nkl, gBu_nkl, mSFA_mkl);
  }

  // Producer (one elected thread): per K block, the A tile, its 128 row scales, the gate
  // rows into B rows [0, 128) and the up rows into [128, 256), all on the stage's
  // transaction barrier.
  template <class TensorA, class TensorBg, class TensorBu, class TensorSFA, class KTileIterator, class BlockCoord>
  CUTLASS_DEVICE void load(Params const& p, MainloopPipeline pipeline, PipelineState smem_pipe_write,
                           cute::tuple<TensorA, TensorBg, TensorBu, TensorSFA> const& load_inputs,
                           BlockCoord const& blk_coord, KTileIterator k_tile_iter, int k_tile_count, int,
                           uint32_t block_rank_in_cluster, TensorStorage& shared_tensors) {
    int lane_predicate = cute::elect_one_sync();
    if (!lane_predicate) return;
    static_assert(size(ClusterShape{}) == 1, "no multicast");
    (void)block_rank_in_cluster;

    Tensor sA = make_tensor(make_smem_ptr(shared_tensors.smem_A.data()), SmemLayoutA{});
    Tensor sSFA = make_tensor(make_smem_ptr(shared_tensors.smem_SFA.data()), filter_zeros(SmemLayoutSFA{}));

    auto [m_coord, n_coord, k_coord, l_coord] = blk_coord;
    Tensor gA = get<0>(load_inputs)(_, _, m_coord, _, l_coord);
    Tensor gSFA = local_tile(get<3>(load_inputs), make_tile(Int<BM>{}, Int<1>{}), make_coord(m_coord, _, l_coord));

    auto block_tma_a = p.tma_load_a.get_slice(0);
    auto block_tma_sfa = p.tma_load_sfa.get_slice(0);
    Tensor tAgA = block_tma_a.partition_S(gA);
    Tensor tAsA = block_tma_a.partition_D(sA);
    Tensor tSgSFA = block_tma_sfa.partition_S(gSFA);
    Tensor tSsSFA = block_tma_sfa.partition_D(sSFA);
    auto gate_up_loads = p.tma_load_gate_up.tile_loads(0, get<1>(load_inputs)(_, _, n_coord, _, l_coord),
                                                       get<2>(load_inputs)(_, _, n_coord, _, l_coord),
                                                       shared_tensors.smem_B.data());

    // k-tile k into stage `stage`, on the stage's transaction barrier:
    auto issue = [&](auto& barrier, int k, int stage) {
      copy(p.tma_load_a.with(barrier, 0), tAgA(_, _, _, k), tAsA(_, _, _, stage));
      copy(p.tma_load_sfa.with(barrier, 0), tSgSFA(_, _, _, k), tSsSFA(_, _, _, stage));
      p.tma_load_gate_up.copy(gate_up_loads, barrier, 0, TMA::CacheHintSm90::EVICT_NORMAL, k, stage);
    };
    tma_producer::for_each_k_tile(pipeline, smem_pipe_write, k_tile_iter, k_tile_count, issue);
  }

  // Auxiliary producer warp: per K block, lane 0 copies the gate block's scale and lane 1
  // the up block's into the stage's two B-scale slots (cp.async); every lane then arrives
  // on the stage's barrier when its copies land (the pipeline counts 1 + 32 arrivals).
  template <class TensorA, class TensorBg, class TensorBu, class TensorSFA, class KTileIterator, class BlockCoord>
  CUTLASS_DEVICE void load_auxiliary(Params const& p, MainloopPipeline pipeline, PipelineState smem_pipe_write,
                                     cute::tuple<TensorA, TensorBg, TensorBu, TensorSFA> const&,
                                     BlockCoord const& blk_coord, KTileIterator k_tile_iter, int k_tile_count,
                                     int thread_idx, uint32_t, TensorStorage& shared_tensors) {
    auto n_coord = get<1>(blk_coord);
    const int lane = thread_idx % 32;
    ElementScale const* src_row = (lane == 0 ? p.ptr_SFBg : p.ptr_SFBu) + int64_t(n_coord) * p.ld_sfb;
    ElementScale* smem_sfb = shared_tensors.smem_SFB.data();
    CUTLASS_PRAGMA_NO_UNROLL
    for (; k_tile_count > 0; --k_tile_count) {
      pipeline.producer_acquire(smem_pipe_write);
      const int stage = smem_pipe_write.index();
      if (lane < 2) {
        ElementScale* dst = smem_sfb + SmemLayoutSFB{}(make_coord(make_coord(_0{}, lane), make_coord(_0{}, _0{}), stage));
        uint32_t dst_addr = cute::cast_smem_ptr_to_uint(dst);
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst_addr), "l"(src_row + *k_tile_iter));
      }
      pipeline.producer_commit(smem_pipe_write, cutlass::arch::cpasync_barrier_arrive_noinc);
      ++k_tile_iter;
      ++smem_pipe_write;
    }
  }

  // Consumer: see the file comment. Releases every stage it reads (mma_tail is empty).
  template <class FrgTensorC>
  CUTLASS_DEVICE void mma(MainloopPipeline pipeline, PipelineState smem_pipe_read, FrgTensorC& accum,
                          int k_tile_count, int thread_idx, TensorStorage& shared_tensors, Params const&) {
    static_assert(decltype(size<1>(accum))::value == 1 && decltype(size<2>(accum))::value == 2,
                  "accumulator: one m64 atom row per warp group, the gate and the up n128 halves");
    Tensor sA = make_tensor(make_smem_ptr(shared_tensors.smem_A.data()), SmemLayoutA{});
    Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), SmemLayoutB{});
    Tensor sBg = local_tile(sB, make_shape(Int<BN>{}, Int<BK>{}, Int<Stages>{}), make_coord(_0{}, _0{}, _0{}));
    Tensor sBu = local_tile(sB, make_shape(Int<BN>{}, Int<BK>{}, Int<Stages>{}), make_coord(_1{}, _0{}, _0{}));
    ElementScale const* smem_sfa = shared_tensors.smem_SFA.data();
    ElementScale const* smem_sfb = shared_tensors.smem_SFB.data();

    TiledMma tiled_mma;
    const int warp_group_idx = __shfl_sync(0xffffffff, thread_idx / cutlass::NumThreadsPerWarpGroup, 0);
    auto wg_mma = tiled_mma.get_slice(warp_group_idx * cutlass::NumThreadsPerWarpGroup);
    Tensor tCrA = wg_mma.make_fragment_A(wg_mma.partition_A(sA));    // (MMA, 1, 4, PIPE)
    Tensor tCrBg = wg_mma.make_fragment_B(wg_mma.partition_B(sBg));  // (MMA, 1, 4, PIPE)
    Tensor tCrBu = wg_mma.make_fragment_B(wg_mma.partition_B(sBu));

    // This thread's two rows of the tile (the sm90 C fragment: value (c, r, j) is row
    // r*8 + base, column 8j + c + base).
    auto thr_mma = tiled_mma.get_slice(thread_idx);
    Tensor tC = thr_mma.partition_C(make_identity_tensor(make_shape(Int<BM>{}, Int<BN>{})));
    const int row0 = get<0>(tC(make_coord(0, 0, 0), 0, 0));
    const int row1 = get<0>(tC(make_coord(0, 1, 0), 0, 0));

    Tensor partial = partition_fragment_C(tiled_mma, make_shape(Int<BM>{}, Int<BN>{}));  // (MMA, 1, 1)
    static_assert(decltype(size(partial))::value * 2 == decltype(size(accum))::value, "half-size partial accumulator");
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size(accum); ++i) accum(i) = 0.0f;

    CUTLASS_PRAGMA_NO_UNROLL
    for (; k_tile_count > 0; --k_tile_count) {
      auto barrier_token = pipeline.consumer_try_wait(smem_pipe_read);
      pipeline.consumer_wait(smem_pipe_read, barrier_token);
      const int stage = smem_pipe_read.index();
      const float sa0 = smem_sfa[SmemLayoutSFA{}(make_coord(make_coord(_0{}, row0), make_coord(_0{}, _0{}), stage))];
      const float sa1 = smem_sfa[SmemLayoutSFA{}(make_coord(make_coord(_0{}, row1), make_coord(_0{}, _0{}), stage))];
      const float sbg = smem_sfb[SmemLayoutSFB{}(make_coord(make_coord(_0{}, 0), make_coord(_0{}, _0{}), stage))];
      const float sbu = smem_sfb[SmemLayoutSFB{}(make_coord(make_coord(_0{}, 1), make_coord(_0{}, _0{}), stage))];
      half_block(tiled_mma, tCrA, tCrBg, stage, partial);
      promote(accum, partial, 0, sa0 * sbg, sa1 * sbg);
      half_block(tiled_mma, tCrA, tCrBu, stage, partial);
      promote(accum, partial, 1, sa0 * sbu, sa1 * sbu);
      pipeline.consumer_release(smem_pipe_read);
      ++smem_pipe_read;
    }
  }

  CUTLASS_DEVICE void mma_tail(MainloopPipeline, PipelineState, int) {}

 private:
  // partial = A(stage) @ B_half(stage)^T over the 128-deep block (4 x k32), completed.
  template <class TensorA_, class TensorB_, class Partial>
  CUTLASS_DEVICE static void half_block(TiledMma& tiled_mma, TensorA_ const& tCrA, TensorB_ const& tCrB, int stage,
                                        Partial& partial) {
    warpgroup_fence_operand(partial);
    warpgroup_arrive();
    tiled_mma.accumulate_ = GMMA::ScaleOut::Zero;
    CUTLASS_PRAGMA_UNROLL
    for (int kb = 0; kb < size<2>(tCrA); ++kb) {
      cute::gemm(tiled_mma, tCrA(_, _, kb, stage), tCrB(_, _, kb, stage), partial);
      tiled_mma.accumulate_ = GMMA::ScaleOut::One;
    }
    warpgroup_commit_batch();
    warpgroup_wait<0>();
    warpgroup_fence_operand(partial);
  }

  // accum(:, 0, half) += partial * (scale of the element's row).
  template <class Accum, class Partial>
  CUTLASS_DEVICE static void promote(Accum& accum, Partial const& partial, int half, float s0, float s1) {
    CUTLASS_PRAGMA_UNROLL
    for (int j = 0; j < decltype(size<0, 2>(partial))::value; ++j) {
      CUTLASS_PRAGMA_UNROLL
      for (int c = 0; c < 2; ++c) {
        auto& a0 = accum(make_coord(c, 0, j), 0, half);
        auto& a1 = accum(make_coord(c, 1, j), 0, half);
        a0 = fmaf(partial(make_coord(c, 0, j), 0, 0), s0, a0);
        a1 = fmaf(partial(make_coord(c, 1, j), 0, 0), s1, a1);
      }
    }
  }
};

// ---------------------------------------------------------------------------------
// Epilogue: h = gelu(gate) * up, quantized to e4m3 per row and 128-column group.
// ---------------------------------------------------------------------------------
struct Fp8GegluEpilogueArguments {
  uint8_t* ptr_hq = nullptr;  // e4m3 [M, H], row stride ldh
  int64_t ldh = 0;
  float* ptr_sh = nullptr;    // scales, sh[h / 128 * ld_sh + m]
  int64_t ld_sh = 0;
  int approximate = 1;        // 1: tanh form, 0: exact (erf)
};

template <int BN>
class Fp8GegluEpilogue : public sm90_epilogue::RegisterEpilogue<Fp8GegluEpilogue<BN>,
                                                                cutlass::float_e4m3_t, Fp8GegluEpilogueArguments,
                                                                sm90_epilogue::StrideRowMajor> {
  using Fp8GegluEpilogue::RegisterEpilogue::params;

 public:
  using Fp8GegluEpilogue::RegisterEpilogue::RegisterEpilogue;
  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class Accumulators, class TiledMma>
  CUTLASS_DEVICE void store_tile(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK blk_shape_MNK,
                                 BlockCoordMNKL blk_coord_mnkl, Accumulators const& acc, TiledMma tiled_mma,
                                 int thread_idx) {
    if (params.approximate) {
      apply<true>(problem_shape_mnkl, blk_shape_MNK, blk_coord_mnkl, acc, tiled_mma, thread_idx);
    } else {
      apply<false>(problem_shape_mnkl, blk_shape_MNK, blk_coord_mnkl, acc, tiled_mma, thread_idx);
    }
  }

 private:
  template <bool kTanh, class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine,
            class FrgLayout, class TiledMma>
  CUTLASS_DEVICE void apply(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK, BlockCoordMNKL blk_coord_mnkl,
                            cute::Tensor<FrgEngine, FrgLayout> const& acc, TiledMma tiled_mma, int thread_idx) {
    constexpr int BM = size<0>(BlockShapeMNK{});
    static_assert(size<1>(BlockShapeMNK{}) == 2 * BN, "tile N is gate block + up block");
    static_assert(rank(FrgLayout{}) == 3 && size<1>(FrgLayout{}) == 1 && size<2>(FrgLayout{}) == 2,
                  "accumulator (V, 1, gate/up)");
    static_assert(size<0, 2>(FrgLayout{}) == BN / 8, "sm90 C fragment of an n128 atom");
    constexpr int NB = BN / 8;

    const int M = int(get<0>(problem_shape_mnkl));
    const int m0 = int(get<0>(blk_coord_mnkl)) * BM;
    const int h0 = int(get<1>(blk_coord_mnkl)) * BN;
    auto thr_mma = tiled_mma.get_thread_slice(thread_idx);
    Tensor tC = thr_mma.partition_C(make_identity_tensor(make_shape(Int<BM>{}, Int<BN>{})));
    const int t = thread_idx & 3;
    uint8_t* __restrict__ hq = params.ptr_hq;

    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < 2; ++r) {
      const int row = m0 + int(get<0>(tC(make_coord(0, r, 0), 0, 0)));
      float h[NB][2];
      float amax = 0.0f;
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < NB; ++j) {
        CUTLASS_PRAGMA_UNROLL
        for (int c = 0; c < 2; ++c) {
          h[j][c] = geglu_cuda::gelu_ex2_rcp<kTanh>(acc(make_coord(c, r, j), 0, 0)) * acc(make_coord(c, r, j), 0, 1);
          amax = fmaxf(amax, fabsf(h[j][c]));
        }
      }
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
      const float scale = amax > 0.0f ? amax / kE4m3Max : 1.0f;
      // h / scale as h * (1 / scale): an IEEE division is a ~20-instruction subroutine,
      // 64 of them a thread per tile, half the epilogue's time, which the Cooperative
      // kernel does not overlap with its mainloop. The product differs from the quotient by
      // at most one float32 ulp, which moves an e4m3 rounding about once in 2^20 values,
      // far below the FP8 MMA's accumulation noise. (x's quantization keeps the division:
      // bf16 inputs land on exact e4m3 ties often, and that pass is bandwidth bound.)
      const float inv_scale = __frcp_rn(scale);
      CUTLASS_PRAGMA_UNROLL
      for (int q = 0; q < NB / 4; ++q) {
        uint32_t p[4];  // columns 8(4q + jj) + 2t, +1 as two e4m3 bytes
        CUTLASS_PRAGMA_UNROLL
        for (int jj = 0; jj < 4; ++jj) {
          const int j = 4 * q + jj;
          p[jj] = fp8_convert::e4m3x2(h[j][0] * inv_scale, h[j][1] * inv_scale);
        }
        sm90_epilogue::quad_transpose(p, t);  // thread t: the 8 columns of block 4q + t
        if (row < M) {
          const int col = h0 + 8 * (4 * q + t);
          *reinterpret_cast<uint2*>(hq + int64_t(row) * params.ldh + col) =
              make_uint2(p[0] | (p[1] << 16), p[2] | (p[3] << 16));
        }
      }
      if (t == 0 && row < M) params.ptr_sh[int64_t(h0 / BN) * params.ld_sh + row] = scale;
    }
  }
};

}  // namespace fp8_sm90
