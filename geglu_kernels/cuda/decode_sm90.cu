// The decode GEMMs of a GeGLU MLP on Hopper (1..8 tokens): the gate/up with the GeGLU
// epilogue and the down projection (a linear with bias and residual), one weight stream
// for both, and their C launchers (decode_sm90.h).
//
// At a few tokens a GEMM is a weight read (Gemma-7B's gate/up: 302 MB of weights for
// 0.15 GFLOP per token), so the kernels stream weights with the math on the side:
// - Rows: a block reads 16 weight row segments (which ones: Layout below). Warp 0 streams
//   them in 512-element chunks, one-dimensional bulk copies (cp.async.bulk, the TMA
//   engine without a tensor map) of each segment's 1 KB chunk into a 2-stage
//   shared-memory ring, each stage completing on an mbarrier. Whole 1 KB row segments
//   per request read at a steady rate whatever ran before; a variant that loaded 16-byte
//   pieces straight into registers (git 509f929) ran 74.6 us at Gemma-7B after the GEMM
//   engine and 93.7 us after cuBLAS's down GEMM, reading 10-23% more DRAM bytes than the
//   weights (benchmarks/results/h200/decode/). Two stages, not three or four: the ring's
//   shared memory comes out of L1, where the token rows (re-read by every block) must
//   stay; with three, the gate/up at Gemma-7B and 8 tokens took 85.0 us against 77.9, and
//   the down projection at Gemma-2-27B with four 120.0 against 90.0.
// - Math: swap-AB mma.sync m16n8k16, the 16 row segments as the A operand and up to 8
//   token segments as the B operand's columns. K is permuted per lane: a dot product may
//   sum its K in any order as long as both operands use the same one, so lane (g, q) =
//   (lane / 4, lane % 4) reads elements 8q..8q+7 and 32+8q..32+8q+7 of a 64-element piece
//   as 16-byte words and feeds element 4s..4s+3 to the fragment slots of k = 2q, 2q+1,
//   2q+8, 2q+9 of k16 step s. The tokens are read from global memory (L1) with the same
//   permutation. Rows are 16 bytes longer than a chunk in shared memory, so a warp's
//   fragment reads hit every bank equally (4 wavefronts per 512 bytes, the minimum).
// - The 8 warps split each chunk (64 elements each) and add their sums in shared memory
//   at the end; the epilogue (biases, GELU and product, or bias and residual) runs in
//   float32 with one rounding.
//
// Measured against the engine's small-M schedule and cuBLAS: docs/DESIGN.md, "The decode
// kernels". Build: part of the geglu_gemm_sm90 kernel (build.toml), sm_90a.

#include "decode_sm90.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "gelu_math.cuh"
#include "sm90_launcher.cuh"
#include "vec.cuh"

namespace geglu_decode {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kStages = 2;

// A block's tile: kRowTiles mma row tiles (16 A rows each) by kTokenTiles column tiles
// (8 B columns each), each warp taking kWords 16-byte words of each row per chunk (32 *
// kWords elements; the 8 warps side by side make the chunk).
template <int kRowTiles, int kTokenTiles, int kWords, bool kStageTokens = false>
struct Tile {
  static constexpr int kRowTilesN = kRowTiles, kTokenTilesN = kTokenTiles, kWordsN = kWords;
  static constexpr bool kStageTokensB = kStageTokens;  // token rows copied into each stage too
  static constexpr int kWeightRows = 16 * kRowTiles;  // weight row segments per block
  static constexpr int kRows = kWeightRows + (kStageTokens ? 8 * kTokenTiles : 0);  // rows per stage
  static constexpr int kPiece = 32 * kWords;          // K elements per warp and chunk
  static constexpr int kChunk = kWarps * kPiece;      // K elements per row and stage
  static constexpr int kRowPitch = kChunk * 2 + 16;   // bytes: the 16-byte skew spreads the banks
  static constexpr int kStageBytes = kRows * kRowPitch;
  static constexpr int kRingBytes = kStages * kStageBytes;
  // The warps' sums (kRowTiles x kTokenTiles x 4 floats per lane) reuse the ring.
  static constexpr int kSumFloats = kWarps * kRowTiles * kTokenTiles * 4 * 32;
  static_assert(kSumFloats * 4 <= kRingBytes, "the warps' sums fit in the ring");
};
// 1..4 tokens: 16 rows (8 hidden units, or the linear's 8 outputs over two K segments)
// by 8 columns, 512-element chunks (1 KB per row copy), a 33,280-byte ring: six blocks
// per SM within the default 48 KB limit.
using NarrowTile = Tile<1, 1, 2>;
static_assert(NarrowTile::kRingBytes + 128 <= 48 * 1024, "within the default limit");
// 5..16 tokens (the gate/up): 64 rows (32 hidden units) by 16 columns, 256-element chunks.
// Every block reads all the tokens' K (from L1/L2): with 16 rows per block, 16 tokens are
// as many bytes as the block's weights (the two-tile attempt, decode3/attempts/); with 64
// rows a quarter.
#ifndef GEGLU_WIDE_ROW_TILES
#define GEGLU_WIDE_ROW_TILES 4
#endif
#ifndef GEGLU_WIDE_WORDS
#define GEGLU_WIDE_WORDS 1
#endif
#ifndef GEGLU_WIDE_BLOCKS
#define GEGLU_WIDE_BLOCKS 3
#endif
#ifndef GEGLU_WIDE_STAGE_TOKENS
#define GEGLU_WIDE_STAGE_TOKENS 0
#endif
using WideTile = Tile<GEGLU_WIDE_ROW_TILES, 2, GEGLU_WIDE_WORDS, GEGLU_WIDE_STAGE_TOKENS != 0>;
#ifndef GEGLU_WIDE_FROM
#define GEGLU_WIDE_FROM 5
#endif
constexpr int kWideFrom = GEGLU_WIDE_FROM;  // the gate/up's first token count on the wide tile

// D += A B on the tensor cores, m16n8k16, float32 accumulators, T = bf16 or fp16 operands
// (the only difference is the PTX type).
template <class T>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                             uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    static_assert(std::is_same_v<T, __half>, "bf16 or fp16 operands");
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// mbarrier and bulk-copy primitives (PTX ISA: mbarrier, cp.async.bulk).
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count));
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, int parity) {
  asm volatile(
      "{\n .reg .pred p;\n WAIT_%=:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra WAIT_%=;\n}\n" ::"r"(
          smem_addr(bar)),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(smem_addr(bar))
               : "memory");
}

// Which weight row segments are the A rows of the block's mma row tiles, and which token
// segments the B columns. Each weight row is cut along K into kSplit segments of seg_len
// elements (the last one shorter), and kGroups weight matrices are read side by side
// (gate/up: w_gate and w_up; the linear: one). Row i of row tile j is segment
// i / (16 / kSplit) of unit j * U + i % U's row in matrix i % (16 / kSplit) / U (U =
// 16 / (kSplit * kGroups) output units per row tile), and B column s * M + t is token t's
// segment s (M <= 8 / kSplit; with kSplit = 1, column c of token tile n is token 8n + c).
// Only products of matching segments are read (summed over s): the others fill columns
// of the instruction that a decode step leaves empty anyway.
// - gate/up, kSplit = 1: per row tile 8 hidden units, gate rows 0-7 and up rows 8-15.
// - linear (the down projection), kSplit = 2: 8 output rows, so the grid has twice the
//   blocks of a 16-row tile, and no reduction crosses blocks (Gemma-7B: 384 blocks, all
//   resident at once on 132 SMs).
template <int kSplit, int kGroups>
struct Layout {
  static constexpr int kSegRows = 16 / kSplit;       // A rows per segment
  static constexpr int kUnits = kSegRows / kGroups;  // output units per row tile
  static constexpr int kMaxM = 8 / kSplit;           // tokens per 8 B columns
  __device__ static int seg(int i) { return i % 16 / kSegRows; }
  __device__ static int group(int i) { return i % kSegRows / kUnits; }
  __device__ static int unit(int i) { return i / 16 * kUnits + i % kUnits; }
};

struct Params {
  const void* x;
  const void* w[2];     // gate/up: w_gate, w_up; linear: w, unused
  const void* bias[2];  // gate/up: b_gate, b_up; linear: bias, unused
  const void* residual; // linear: [M, rows] (row stride ldr) added in the epilogue, or null
  void* out;
  int64_t ldx, ldw, ldo, ldr;
  int K, seg_len;       // seg_len: each row segment's length (gate/up: K)
  int M, rows;          // tokens; output columns (H or N)
};

// Segment s's length along K (seg_len: a multiple of 8, so every segment starts 16-byte
// aligned).
__device__ __forceinline__ int seg_len(const Params& p, int s) { return max(0, min(p.seg_len, p.K - s * p.seg_len)); }

// The warps' float32 sums over the whole K, in the ring after the stream: sums(w, j, n)[r]
// [lane] is warp w's accumulator r of row tile j and token tile n (C[g][2q], C[g][2q + 1],
// C[8 + g][2q], C[8 + g][2q + 1] for lane (g, q)).
template <class Tl>
struct WarpSums {
  const float* base;
  __device__ const float* at(int w, int j, int n) const {
    return base + ((w * Tl::kRowTilesN + j) * Tl::kTokenTilesN + n) * 4 * 32;
  }
  // The sum over the warps of C[row][col] of row tile j, token tile n (row < 16, col < 8).
  __device__ float sum(int j, int n, int row, int col) const {
    const int reg = (row >= 8 ? 2 : 0) + col % 2, lane = 4 * (row % 8) + col / 2;
    float s = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) s += at(w, j, n)[reg * 32 + lane];
    return s;
  }
};

// The weight stream and the math shared by the kernels: the block's Tl::kRows row
// segments through the ring into the mma. Returns the warps' sums, visible to the block.
template <class T, class Tl, int kSplit, int kGroups>
__device__ __forceinline__ WarpSums<Tl> stream_rows(const Params& p, int64_t unit0) {
  using L = Layout<kSplit, kGroups>;
  constexpr int kR = Tl::kRowTilesN, kN = Tl::kTokenTilesN, kW = Tl::kWordsN;
  constexpr int kChunk = Tl::kChunk, kRowPitch = Tl::kRowPitch, kStageBytes = Tl::kStageBytes;
  static_assert(kSplit == 1 || kN == 1, "K segments share the B columns of one token tile");
  static_assert(kSplit == 1 || !Tl::kStageTokensB, "staged token rows are whole rows of x");
  extern __shared__ __align__(128) unsigned char ring[];
  __shared__ __align__(8) uint64_t full[kStages];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, q = lane % 4;
  const int chunks = (p.seg_len + kChunk - 1) / kChunk;
  if (threadIdx.x == 0) {
    for (int i = 0; i < kStages; ++i) mbar_init(&full[i], 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  // Blocks start at different chunks of their rows (and wrap around): blocks that run
  // at once then read addresses spread over the rows rather than the same column of
  // every row, which the DRAM serves at a fraction of its rate (Gemma-7B down
  // projection: 55.3 us unstaggered, 46.4 staggered; Gemma-2-2B gate/up 28.7 and 25.9).
  const int first = int(blockIdx.x % unsigned(chunks));
  auto chunk_k = [&](int c) { return (c + first < chunks ? c + first : c + first - chunks) * kChunk; };
  // Warp 0 fills the stages, lane i copying A rows i, 32 + i, ... (where the tile has
  // them): their source row segments (null past `rows`; the math zeroes what rows and
  // segments not copied would hold). The lanes each issue their copies, where one thread
  // issuing all 16 per stage put its address arithmetic between the stage's release and
  // its refill every time (Gemma-7B down projection: 55.5 us through one thread's loop,
  // 40.2 with sixteen lanes).
  constexpr int kCopies = (Tl::kRows + 31) / 32;
  const T* src[kCopies];
  int src_len[kCopies];
#pragma unroll
  for (int i = 0; i < kCopies; ++i) {
    const int row = lane + 32 * i;
    src[i] = nullptr, src_len[i] = 0;
    if (warp == 0 && row < Tl::kWeightRows && unit0 + L::unit(row) < p.rows) {
      src[i] = static_cast<const T*>(L::group(row) == 1 ? p.w[1] : p.w[0]) + (unit0 + L::unit(row)) * p.ldw +
               int64_t(L::seg(row)) * p.seg_len;
      src_len[i] = seg_len(p, L::seg(row));
    } else if (warp == 0 && row >= Tl::kWeightRows && row < Tl::kRows && row - Tl::kWeightRows < p.M) {
      // Token row row - kWeightRows (kSplit = 1).
      src[i] = static_cast<const T*>(p.x) + (row - Tl::kWeightRows) * p.ldx;
      src_len[i] = p.K;
    }
  }
  // Warp 0: chunk c of the block's row segments into its stage. Lane 0 arrives on the
  // stage's mbarrier with the whole stage's byte count before any copy is issued, one
  // shared-memory atomic per stage where one expect_tx per copy put 16-128 of them,
  // serialized, between the stage's release and its refill.
  auto issue = [&](int c) {
    const int k0 = chunk_k(c);
    uint64_t* bar = &full[c % kStages];
    uint32_t bytes[kCopies], mine = 0;
#pragma unroll
    for (int i = 0; i < kCopies; ++i) {
      const int elems = src[i] != nullptr ? min(kChunk, src_len[i] - k0) : 0;
      bytes[i] = elems > 0 ? uint32_t(elems) * sizeof(T) : 0u;
      mine += bytes[i];
    }
    const uint32_t total = __reduce_add_sync(0xffffffffu, mine);
    if (lane == 0) mbar_arrive_expect_tx(bar, total);
    __syncwarp();
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // the warps' reads before the async writes
#pragma unroll
    for (int i = 0; i < kCopies; ++i) {
      if (bytes[i] != 0) {
        bulk_copy(ring + (c % kStages) * kStageBytes + (lane + 32 * i) * kRowPitch, src[i] + k0, bytes[i], bar);
      }
    }
  };
  if (warp == 0) {
    for (int c = 0; c < kStages && c < chunks; ++c) issue(c);
  }
  // This lane's A rows g and 8 + g (of every row tile) hold K up to len_a0 / len_a1 of
  // their segments.
  static_assert(L::kSegRows >= 8, "A rows 0-7 lie in segment 0");
  const int len_a0 = seg_len(p, 0), len_a1 = seg_len(p, L::seg(8));
  // B column g of token tile n: kSplit = 1, token 8n + g; else token g % M's segment g / M.
  const T* x[kN];
  int x_len[kN];
#pragma unroll
  for (int n = 0; n < kN; ++n) {
    const int b_seg = kSplit == 1 ? (8 * n + g < p.M ? 0 : 1) : g / p.M;
    const int token = kSplit == 1 ? 8 * n + g : g - b_seg * p.M;
    const bool has_token = b_seg < kSplit;
    x_len[n] = has_token ? seg_len(p, b_seg) : 0;
    x[n] = static_cast<const T*>(p.x) + (has_token ? token * p.ldx + int64_t(b_seg) * p.seg_len : int64_t(0));
  }
  const uint4 zero = make_uint4(0, 0, 0, 0);
  const int e0 = warp * Tl::kPiece;  // this warp's elements of each chunk
  // The tokens' words for chunk c, loaded one chunk ahead of their use: an L1 miss then
  // overlaps the wait for the weights instead of following it (the down projection's
  // token rows, 48 KB at Gemma-7B, miss L1: 46.4 us loading after the wait, 40.3 ahead).
  auto load_tokens = [&](int c, uint4 (&b)[kN][kW]) {
#pragma unroll
    for (int n = 0; n < kN; ++n) {
#pragma unroll
      for (int s = 0; s < kW; ++s) {
        const int k = chunk_k(c) + e0 + 8 * q + 32 * s;
        if constexpr (Tl::kStageTokensB) {
          const unsigned char* row = ring + (c % kStages) * kStageBytes + (Tl::kWeightRows + 8 * n + g) * kRowPitch;
          b[n][s] = k < x_len[n] ? *reinterpret_cast<const uint4*>(row + (e0 + 8 * q + 32 * s) * 2) : zero;
        } else {
          b[n][s] = k < x_len[n] ? __ldg(reinterpret_cast<const uint4*>(x[n] + k)) : zero;
        }
      }
    }
  };
  // The gate/up's tokens stay in L1 (a few KB, read by every block): there the 8
  // registers the prefetch holds cost more occupancy than the prefetch saves, and each
  // chunk's words are loaded just before the wait for its stage instead (after it, the
  // L1 latency was half of the kernel's stalls, ncu; before it, Gemma-2-2B 25.0 us against
  // 25.9, Gemma-7B 76.0 against 76.6).
  constexpr bool kPrefetchTokens = kGroups == 1;
  uint4 b_next[kN][kW];
  if (kPrefetchTokens) load_tokens(0, b_next);
  float acc[kR][kN][4] = {};
  for (int c = 0; c < chunks; ++c) {
    uint4 b[kN][kW];
    if (kPrefetchTokens) {
#pragma unroll
      for (int n = 0; n < kN; ++n)
#pragma unroll
        for (int s = 0; s < kW; ++s) b[n][s] = b_next[n][s];
      if (c + 1 < chunks) load_tokens(c + 1, b_next);
    } else if (!Tl::kStageTokensB) {
      load_tokens(c, b);  // in flight during the wait
    }
    mbar_wait(&full[c % kStages], (c / kStages) & 1);
    if (Tl::kStageTokensB) load_tokens(c, b);
    const unsigned char* stage = ring + (c % kStages) * kStageBytes;
#pragma unroll
    for (int j = 0; j < kR; ++j) {
      uint4 a[2][kW];  // [A rows g, 8 + g of row tile j][word]
#pragma unroll
      for (int s = 0; s < kW; ++s) {
        const int e = e0 + 8 * q + 32 * s, k = chunk_k(c) + e;
        // Lengths are multiples of 8: a 16-byte word is all in or all out.
        const unsigned char* rows = stage + 16 * j * kRowPitch + e * 2;
        a[0][s] = k < len_a0 ? *reinterpret_cast<const uint4*>(rows + g * kRowPitch) : zero;
        a[1][s] = k < len_a1 ? *reinterpret_cast<const uint4*>(rows + (g + 8) * kRowPitch) : zero;
      }
#pragma unroll
      for (int step = 0; step < 2 * kW; ++step) {
        const int s = step / 2, w = (step % 2) * 2;
#pragma unroll
        for (int n = 0; n < kN; ++n) {
          mma_m16n8k16<T>(acc[j][n], word(a[0][s], w), word(a[1][s], w), word(a[0][s], w + 1),
                          word(a[1][s], w + 1), word(b[n][s], w), word(b[n][s], w + 1));
        }
      }
    }
    __syncthreads();  // every warp is done with the stage
    if (warp == 0 && c + kStages < chunks) issue(c + kStages);
  }
  // No copy is in flight past the last stage: the ring holds the sums now.
  float* sums = reinterpret_cast<float*>(ring);
#pragma unroll
  for (int j = 0; j < kR; ++j)
#pragma unroll
    for (int n = 0; n < kN; ++n)
#pragma unroll
      for (int r = 0; r < 4; ++r) sums[((warp * kR + j) * kN + n) * 128 + r * 32 + lane] = acc[j][n][r];
  __syncthreads();
  return WarpSums<Tl>{sums};
}

// The gate/up with the GeGLU epilogue. Narrow tile (1-4 tokens): six blocks per SM, the
// most the ring's shared memory allows (40 registers). K is not cut: 4 hidden units per
// block over halves of K ran slower at every Gemma shape and token count (Gemma-7B,
// 1 token: 83.3 us against 76.1; results/h200/decode2/attempts/), more blocks each paying
// the ring's start-up.
template <class T, class Tl, int kMinBlocks, bool kTanh>
__global__ void __launch_bounds__(kThreads, kMinBlocks) decode_gate_up(const Params p) {
  using geglu_cuda::to_float;
  using L = Layout<1, 2>;
  constexpr int kUnits = L::kUnits * Tl::kRowTilesN, kTokens = 8 * Tl::kTokenTilesN;
  const int64_t unit0 = int64_t(blockIdx.x) * kUnits;
  const WarpSums<Tl> sums = stream_rows<T, Tl, 1, 2>(p, unit0);
  // Thread i finishes outputs i, i + kThreads, ... of the block's (unit, token) pairs.
  for (int i = threadIdx.x; i < kUnits * kTokens; i += kThreads) {
    const int token = i % kTokens, u = i / kTokens;
    const int64_t col = unit0 + u;
    if (token >= p.M || col >= p.rows) continue;
    const int j = u / L::kUnits, r = u % L::kUnits, n = token / 8, c = token % 8;
    float gate = sums.sum(j, n, r, c), up = sums.sum(j, n, L::kUnits + r, c);
    if (p.bias[0]) gate += to_float(static_cast<const T*>(p.bias[0])[col]);
    if (p.bias[1]) up += to_float(static_cast<const T*>(p.bias[1])[col]);
    static_cast<T*>(p.out)[token * p.ldo + col] = geglu_cuda::from_float<T>(geglu_cuda::gelu<kTanh>(gate) * up);
  }
}

constexpr int kLinearSplit = 2;

// Four blocks per SM (60 registers): capped at five, the spilled registers cost more
// than the extra block gained (Gemma-7B 42.2 us against 40.2), so where the grid needs
// more than one wave of blocks the op keeps cuBLAS (geglu_decode_sm90_linear_max_n).
template <class T>
__global__ void __launch_bounds__(kThreads, 4) decode_linear(const Params p) {
  using geglu_cuda::to_float;
  using L = Layout<kLinearSplit, 1>;
  const int64_t row0 = int64_t(blockIdx.x) * L::kUnits;
  const WarpSums<NarrowTile> sums = stream_rows<T, NarrowTile, kLinearSplit, 1>(p, row0);
  if (threadIdx.x >= L::kUnits * L::kMaxM) return;
  const int token = threadIdx.x % L::kMaxM, r = threadIdx.x / L::kMaxM;
  const int64_t col = row0 + r;
  if (token >= p.M || col >= p.rows) return;
  float y = 0.0f;
#pragma unroll
  for (int s = 0; s < kLinearSplit; ++s) y += sums.sum(0, 0, s * L::kSegRows + r, s * p.M + token);
  if (p.bias[0]) y += to_float(static_cast<const T*>(p.bias[0])[col]);
  if (p.residual) y += to_float(static_cast<const T*>(p.residual)[token * p.ldr + col]);
  static_cast<T*>(p.out)[token * p.ldo + col] = geglu_cuda::from_float<T>(y);
}

using Kernel = void (*)(Params);

bool aligned(const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// The checks both launchers share; GEGLU_SM90_OK or the status to return.
int check_problem(int64_t M, int64_t max_m, int64_t K, int64_t ldx, int64_t ldw, int64_t rows, int64_t ldo,
                  int dtype, const void* x, const void* w0, const void* w1, const void* out) {
  if (dtype != GEGLU_SM90_BF16 && dtype != GEGLU_SM90_FP16) return GEGLU_SM90_ERR_DTYPE;
  constexpr int64_t kMax = (int64_t(1) << 31) - 1;
  if (M < 0 || M > max_m || K < 1 || rows < 1 || K > kMax || rows > kMax || ldx < K || ldw < K || ldo < rows) {
    return GEGLU_SM90_ERR_SHAPE;
  }
  if (K % 8 != 0 || ldx % 8 != 0 || ldw % 8 != 0) return GEGLU_SM90_ERR_STRIDE;
  if (!aligned(x, 16) || !aligned(w0, 16) || !aligned(w1, 16) || out == nullptr || !aligned(out, 2)) {
    return GEGLU_SM90_ERR_ALIGN;
  }
  return GEGLU_SM90_OK;
}

// K cut into `split` segments of whole 16-byte words (K is a multiple of 8).
int segment_length(int64_t K, int split) { return int(((K + split - 1) / split + 7) / 8 * 8); }

using Raised = std::atomic<bool>[sm90_launcher::kMaxDevices];

// Launches `kernel` over the rows with tile Tl's ring. A ring past the default 48 KB needs
// the kernel's limit raised first, once per device (`raised` records it).
template <class Tl>
int launch(Kernel kernel, int units_per_block, Params p, void* stream, Raised* raised = nullptr) {
  int device = 0;
  if (sm90_launcher::current_sm90_device(&device) == nullptr) return GEGLU_SM90_ERR_DEVICE;
  if (p.M == 0) return GEGLU_SM90_OK;
  cudaError_t e = cudaSuccess;
  if (Tl::kRingBytes > 48 * 1024 && !(*raised)[device].load(std::memory_order_acquire)) {
    e = cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), cudaFuncAttributeMaxDynamicSharedMemorySize,
                             Tl::kRingBytes);
    if (e == cudaSuccess) (*raised)[device].store(true, std::memory_order_release);
  }
  if (e == cudaSuccess) {
    void* args[] = {&p};
    const unsigned blocks = unsigned((p.rows + units_per_block - 1) / units_per_block);  // < 2^29
    e = cudaLaunchKernel(reinterpret_cast<const void*>(kernel), dim3(blocks), dim3(kThreads), args, Tl::kRingBytes,
                         static_cast<cudaStream_t>(stream));
  }
  if (e != cudaSuccess) {
    sm90_launcher::record_cuda_error(e);
    return GEGLU_SM90_ERR_CUDA;
  }
  return GEGLU_SM90_OK;
}

}  // namespace geglu_decode

extern "C" int geglu_decode_sm90_gate_up(const void* x, int64_t M, int64_t K, int64_t ldx, const void* w_gate,
                                         const void* w_up, int64_t ldw, const void* b_gate, const void* b_up,
                                         void* out, int64_t H, int64_t ldo, int dtype, int approximate,
                                         void* stream) {
  using namespace geglu_decode;
  const int status = check_problem(M, GEGLU_DECODE_MAX_M, K, ldx, ldw, H, ldo, dtype, x, w_gate, w_up, out);
  if (status != GEGLU_SM90_OK) return status;
  if (!aligned(b_gate, 2) || !aligned(b_up, 2)) return GEGLU_SM90_ERR_ALIGN;
  const int index = (dtype == GEGLU_SM90_BF16 ? 0 : 2) + (approximate != 0 ? 1 : 0);
  Params p = {};
  p.x = x;
  p.w[0] = w_gate;
  p.w[1] = w_up;
  p.bias[0] = b_gate;
  p.bias[1] = b_up;
  p.out = out;
  p.ldx = ldx, p.ldw = ldw, p.ldo = ldo;
  p.K = int(K), p.seg_len = int(K);
  p.M = int(M), p.rows = int(H);
  if (M < kWideFrom) {
    using Tl = NarrowTile;
    const Kernel kernels[4] = {decode_gate_up<__nv_bfloat16, Tl, 6, false>, decode_gate_up<__nv_bfloat16, Tl, 6, true>,
                               decode_gate_up<__half, Tl, 6, false>, decode_gate_up<__half, Tl, 6, true>};
    return launch<Tl>(kernels[index], Layout<1, 2>::kUnits * Tl::kRowTilesN, p, stream);
  }
  using Tl = WideTile;
  constexpr int kB = GEGLU_WIDE_BLOCKS;
  const Kernel kernels[4] = {decode_gate_up<__nv_bfloat16, Tl, kB, false>, decode_gate_up<__nv_bfloat16, Tl, kB, true>,
                             decode_gate_up<__half, Tl, kB, false>, decode_gate_up<__half, Tl, kB, true>};
  static Raised raised[4];
  return launch<Tl>(kernels[index], Layout<1, 2>::kUnits * Tl::kRowTilesN, p, stream, &raised[index]);
}

extern "C" int geglu_decode_sm90_linear(const void* x, int64_t M, int64_t K, int64_t ldx, const void* w,
                                        int64_t ldw, const void* bias, const void* residual, int64_t ldr,
                                        void* out, int64_t N, int64_t ldo, int dtype, void* stream) {
  using namespace geglu_decode;
  const int status = check_problem(M, GEGLU_DECODE_LINEAR_MAX_M, K, ldx, ldw, N, ldo, dtype, x, w, w, out);
  if (status != GEGLU_SM90_OK) return status;
  if (residual != nullptr && ldr < N) return GEGLU_SM90_ERR_SHAPE;
  if (!aligned(bias, 2) || !aligned(residual, 2)) return GEGLU_SM90_ERR_ALIGN;
  static_assert(GEGLU_DECODE_LINEAR_MAX_M == Layout<kLinearSplit, 1>::kMaxM, "each token's segments take B columns");
  const Kernel kernel = dtype == GEGLU_SM90_BF16 ? decode_linear<__nv_bfloat16> : decode_linear<__half>;
  Params p = {};
  p.x = x;
  p.w[0] = w;
  p.bias[0] = bias;
  p.residual = residual;
  p.out = out;
  p.ldx = ldx, p.ldw = ldw, p.ldo = ldo, p.ldr = ldr;
  p.K = int(K), p.seg_len = segment_length(K, kLinearSplit);
  p.M = int(M), p.rows = int(N);
  return launch<NarrowTile>(kernel, Layout<kLinearSplit, 1>::kUnits, p, stream);
}

extern "C" int64_t geglu_decode_sm90_linear_max_n(void) {
  using namespace geglu_decode;
  static std::atomic<int64_t> known[sm90_launcher::kMaxDevices];  // 0: not asked yet
  int device = 0;
  const sm90_launcher::DeviceInfo* info = sm90_launcher::current_sm90_device(&device);
  if (info == nullptr) return 0;
  int64_t max_n = known[device].load(std::memory_order_relaxed);
  if (max_n == 0) {
    // One query for both dtypes: their kernels differ only in the mma's PTX type.
    int per_sm = 0;
    const cudaError_t e =
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, decode_linear<__nv_bfloat16>, kThreads, NarrowTile::kRingBytes);
    if (e != cudaSuccess) {
      sm90_launcher::record_cuda_error(e);
      return 0;
    }
    max_n = int64_t(per_sm) * info->sm_count * Layout<kLinearSplit, 1>::kUnits;
    known[device].store(max_n, std::memory_order_relaxed);
  }
  return max_n;
}
