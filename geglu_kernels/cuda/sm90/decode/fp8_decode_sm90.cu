// The block-scaled FP8 GeGLU MLP at 1-16 tokens on Hopper (sm_90a): its two GEMMs as
// weight-streaming kernels, and their C launchers (fp8_mlp_sm90.h).
//
// At a few tokens the MLP is a weight read (Gemma-7B: 226 MB of e4m3 weights for 0.9
// GFLOP per token), so each block streams its weight rows through a shared-memory ring as
// fast as the TMA engine brings them, and the tensor cores take them from there:
// - A stage is one 128-deep K block (one block of the scale format): two 64-row boxes of
//   weights (8 KB each, 128-byte swizzle), loaded by one producer thread with tensor-map
//   copies, evict-first, refilled two stages at a time (each row's 256 contiguous bytes
//   at once), and the tokens' box (8 or 16 rows of e4m3, the rows past M zeros). A stage
//   is free again once the wgmmas that read it retire.
// - The tokens' box: x itself (bf16/fp16) is quantized in the kernel, 1x128 as the
//   quantization pass computes it (fp8_convert.cuh, the same bits): per stage the
//   consumers load the K block of every token (from L2; loads issued one stage ahead),
//   form each group's scale and write the e4m3 box into the stage in the 128-byte swizzle
//   the wgmma reads, so neither the gate/up nor the linear waits for a quantization
//   kernel (one launch fewer per call). The MLP's down reads h, which the gate/up
//   quantized, by TMA.
// - Math: swap-AB wgmma m64nNk32 e4m3 straight from shared memory (N = 8 or 16 tokens),
//   one warpgroup: per stage, 4 k32 steps per box into a partial that is promoted into
//   the float32 sum with scale_w x scale_x (one K block: DeepGEMM's promotion). Hopper's
//   mma.sync has no e4m3 form (ptxas emulates it with e4m3-to-f16 unpacks, which held
//   the earlier mma.sync kernels at 2x the weight-read floor); wgmma reads e4m3 natively.
// - gate/up: box 0 holds gate rows n0..n0+63, box 1 the matching up rows, so each thread
//   holds gate and up of the same h elements and forms h = gelu(gate) * up in float32. A
//   128-column group of h (the unit of its quantization) spans two blocks: each stores
//   its h to a float32 workspace and counts itself on the group's counter; the second
//   quantizes the group for every token (1x128, as fp8_mlp_sm90.h states) and sets the
//   counter back to 0.
// - down: a block owns 128 output rows (both boxes) and one split of K; the splits'
//   float32 sums go to the workspace and the last block of a row tile adds them in split
//   order (deterministic) with the residual. Splits are chosen so that the grid is one
//   wave of two blocks per SM.
// - Each kernel is launched as a programmatic dependent of the one before it (PDL). The
//   MLP's down producer issues its first stages' weights before griddepcontrol.wait, so
//   its weight stream starts under the gate/up's tail (the gate/up writes h, never the
//   weights). The op's first kernel (the gate/up, the linear: kQuantizeX) follows a kernel
//   that may be anyone's, which may have written the weights, so its producer waits
//   first; only its prologue (barriers, tensor-map prefetch) overlaps that kernel.
// Build: part of the geglu_gemm_sm90 kernel (build.toml), sm_90a.

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>

#include "sm90/decode/bulk_copy_ring.cuh"
#include "sm90/fp8/fp8_convert.cuh"
#include "sm90/fp8/fp8_mlp_sm90.h"
#include "activation/gelu_math.cuh"
#include "sm90/common/sm90_launcher.cuh"
#include "sm90/common/tile_counters.h"
#include "activation/vec.cuh"

namespace fp8_decode {

using namespace bulk_copy_ring;

constexpr int kBlock = 128;                     // K elements (bytes) per scale block: one swizzled row
constexpr int kBoxRows = 64;                    // weight rows per box: one wgmma m64
constexpr int kBoxBytes = kBoxRows * kBlock;    // 8 KB
constexpr int kConsumerThreads = 128;           // one warpgroup
constexpr int kThreads = kConsumerThreads + 32;  // and the producer warp
// Ring depth and blocks per SM; either way 12 stages of 17-18 KB in flight per SM, which
// the gate/up keeps only while every tile is resident (64 columns of h a tile: Gemma-7B
// 384, Gemma-2B 256 for 132 SMs).
template <int kStages_, int kBlocksPerSm_>
struct Occupancy {
  static constexpr int kStages = kStages_, kBlocksPerSm = kBlocksPerSm_;
};
using ThreePerSm = Occupancy<4, 3>;  // gate/up at over 2 tiles per SM
using TwoPerSm = Occupancy<6, 2>;    // gate/up at up to 2, and the down projection

template <int kN, int kStages_>
struct Ring {
  static constexpr int kStages = kStages_;
  static constexpr int kStageBytes = 2 * kBoxBytes + kN * kBlock;  // a multiple of 1024: each box stays aligned
  static constexpr int kTokensOffset = 2 * kBoxBytes;
  static constexpr int kSmemBytes = kStages * kStageBytes + 1024;  // + the slack to align the ring to 1024 bytes
};

struct Params {
  int k_blocks;         // K / 128
  int split_blocks;     // down: K blocks per split
  int M;                // tokens (<= N of the wgmma)
  int rows;             // H (gate/up) or N (down)
  const float* act_scale;  // [K / 128, ld_s] (M-major)
  int64_t ld_s;
  const float* s0;      // gate (gate/up) or down block scales [rows / 128, K / 128]
  const float* s1;      // up (gate/up only)
  int* counters;
  // gate/up
  float* h;             // [M, H] float32 workspace
  uint8_t* hq;          // [M, H] e4m3
  float* sh;            // [H / 128, ld_sh]
  int64_t ld_sh;
  // x [M, K] (bf16/fp16, row stride ld_x), quantized in the kernel (kQuantizeX)
  const void* x;
  int64_t ld_x;
  // down
  float* partials;      // [splits, M, N] float32 workspace
  const void* residual;  // [M, N] or null
  void* out;             // [M, N]
};

__device__ __forceinline__ void wait_for_previous_kernel() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void allow_next_kernel() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }
// The consumer warpgroup's barrier (the producer warp does not take part).
__device__ __forceinline__ void consumer_sync() { asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumerThreads) : "memory"); }

__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}

// Box (c0 = K byte, c1 = row) of `map` into dst, completing on bar.
__device__ __forceinline__ void tma_load(void* dst, const CUtensorMap* map, int c0, int c1, uint64_t* bar,
                                         uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, "
      "%3}], [%4], %5;\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(smem_addr(bar)), "l"(policy)
      : "memory");
}
__device__ __forceinline__ uint64_t l2_policy(bool evict_first) {
  uint64_t policy;
  if (evict_first) {
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  } else {
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(policy));
  }
  return policy;
}

// The wgmma descriptor of a K-major operand in 128-byte-swizzled rows of 128 bytes (8-row
// atoms 1024 bytes apart), starting at `smem` (1024-aligned, plus a k32 step of 32 bytes).
__device__ __forceinline__ uint64_t sw128_desc(const void* smem) {
  const uint64_t addr = smem_addr(smem);
  return ((addr & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

// D (+)= A B, m64nNk32, e4m3 operands from shared memory, float32 accumulators.
template <int kN>
__device__ __forceinline__ void wgmma(float (&d)[kN / 2], uint64_t a, uint64_t b, int accumulate);
template <>
__device__ __forceinline__ void wgmma<8>(float (&d)[4], uint64_t a, uint64_t b, int accumulate) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %6, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, %4, %5, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "l"(a), "l"(b), "r"(accumulate));
}
template <>
__device__ __forceinline__ void wgmma<16>(float (&d)[8], uint64_t a, uint64_t b, int accumulate) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %10, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, "
      "1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "l"(a), "l"(b), "r"(accumulate));
}
template <int R>
__device__ __forceinline__ void fence_registers(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// Accumulator element i of this thread (m64nN layout): weight row 16 warp + g + 8 ((i / 2)
// % 2) of the box, token 8 (i / 4) + 2 q + i % 2.
__device__ __forceinline__ int acc_row(int i) {
  const int t = threadIdx.x;
  return 16 * (t / 32) + (t % 32) / 4 + 8 * ((i / 2) % 2);
}
__device__ __forceinline__ int acc_token(int i) { return 8 * (i / 4) + 2 * (threadIdx.x % 4) + i % 2; }

// What a block streams: its two boxes' weight rows, its K blocks and their scales.
struct GateUpTile {
  // Box 0: gate rows 64 b..; box 1: the same up rows; all of K.
  __device__ static int row(int) { return kBoxRows * int(blockIdx.x); }
  __device__ static int first_block(const Params&) { return 0; }
  __device__ static int blocks(const Params& p) { return p.k_blocks; }
  __device__ static const float* scales(const Params& p, int box) {
    return (box == 0 ? p.s0 : p.s1) + int64_t(row(box) / kBlock) * p.k_blocks;
  }
};
struct DownTile {
  // Box 0: rows 128 b.., box 1 the next 64; K blocks of split blockIdx.y.
  __device__ static int row(int box) { return 2 * kBoxRows * int(blockIdx.x) + kBoxRows * box; }
  __device__ static int first_block(const Params& p) { return int(blockIdx.y) * p.split_blocks; }
  __device__ static int blocks(const Params& p) {
    return min(p.split_blocks, p.k_blocks - first_block(p));
  }
  __device__ static const float* scales(const Params& p, int) {
    return p.s0 + int64_t(row(0) / kBlock) * p.k_blocks;
  }
};

// The tokens' box of one stage from x (kQuantizeX): 16 lanes a (token, K block) group, 8
// values each, kN / 8 groups a thread (token threadIdx / 16 + 8 j); tokens past M are
// zeros (scale 1).
template <int kN, class XT>
struct XQuantizer {
  static constexpr int kGroups = kN / 8;
  uint4 v[kGroups];
  __device__ __forceinline__ int lane() const { return threadIdx.x % 16; }
  __device__ __forceinline__ int token(int j) const { return threadIdx.x / 16 + 8 * j; }
  __device__ __forceinline__ void load(const Params& p, int kb) {
    const XT* x = static_cast<const XT*>(p.x) + int64_t(kb) * kBlock + 8 * lane();
#pragma unroll
    for (int j = 0; j < kGroups; ++j) {
      v[j] = token(j) < p.M ? __ldg(reinterpret_cast<const uint4*>(x + token(j) * p.ld_x)) : make_uint4(0, 0, 0, 0);
    }
  }
  // Row t of the box at t * 128 bytes; its 16-byte chunk c at chunk c ^ (t % 8) (the
  // swizzle TMA would have written; the box is 1024-byte aligned).
  __device__ __forceinline__ void store(unsigned char* box, float* scales) const {
#pragma unroll
    for (int j = 0; j < kGroups; ++j) {
      float f[8];
      fp8_convert::unpack8<XT>(v[j], f);
      float amax = 0.0f;
#pragma unroll
      for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(f[i]));
      const float scale = fp8_convert::group_scale(amax);
      const int t = token(j), chunk = (lane() / 2) ^ (t % 8);
      *reinterpret_cast<uint2*>(box + t * kBlock + chunk * 16 + (lane() % 2) * 8) = fp8_convert::quantize8(f, scale);
      if (lane() == 0) scales[t] = scale;
    }
  }
};

// The weight stream and the math: the producer warp's lane 0 fills the ring; the
// consumer warpgroup runs the wgmmas and leaves with acc[box][i] = the block's float32 sums
// (the thread's elements, acc_row / acc_token), then runs epilogue(acc) (consumers only).
// kQuantizeX: the tokens' boxes come from x (XQuantizer) and `act` is not read; else TMA
// loads them from the e4m3 activations `act` with their scales p.act_scale.
template <class Tile, int kN, int kStages, bool kQuantizeX, class XT, class Epilogue>
__device__ __forceinline__ void stream_tile(const CUtensorMap* w0, const CUtensorMap* w1, const CUtensorMap* act,
                                            const Params& p, Epilogue&& epilogue) {
  extern __shared__ unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t full[kStages], empty[kStages];
  __shared__ float x_scales[2][kN];  // kQuantizeX: stage i's token scales in [i % 2]
  using S = Ring<kN, kStages>;
  // The bytes a stage's TMA copies bring (the tokens' box only when loaded).
  constexpr uint32_t kStageTx = kQuantizeX ? 2 * kBoxBytes : S::kStageBytes;
  unsigned char* ring =
      smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);  // the 128-byte swizzle's 1024-byte atoms
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int kb0 = Tile::first_block(p), blocks = Tile::blocks(p);
  if (threadIdx.x == 0) {
    for (int i = 0; i < kStages; ++i) {
      mbar_init(&full[i], 1);
      mbar_init(&empty[i], kConsumerThreads / 32);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  allow_next_kernel();

  if (warp == kConsumerThreads / 32) {  // the producer
    if (lane != 0) return;
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(w0)) : "memory");
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(w1)) : "memory");
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(act)) : "memory");
    const uint64_t weights = l2_policy(true), tokens = l2_policy(false);
    auto load_weights = [&](int i) {
      unsigned char* stage = ring + (i % kStages) * S::kStageBytes;
      const int k = (kb0 + i) * kBlock;
      mbar_arrive_expect_tx(&full[i % kStages], kStageTx);
      tma_load(stage, w0, k, Tile::row(0), &full[i % kStages], weights);
      tma_load(stage + kBoxBytes, w1, k, Tile::row(1), &full[i % kStages], weights);
    };
    auto load_tokens = [&](int i) {
      if constexpr (!kQuantizeX) {
        tma_load(ring + (i % kStages) * S::kStageBytes + S::kTokensOffset, act, (kb0 + i) * kBlock, 0,
                 &full[i % kStages], tokens);
      }
    };
    const int first = min(kStages, blocks);
    // The op's first kernel waits before any load (the kernel before is not ours); the
    // down reads h, which the kernel before wrote, but not the weights.
    if constexpr (kQuantizeX) wait_for_previous_kernel();
    for (int i = 0; i < first; ++i) load_weights(i);
    if constexpr (!kQuantizeX) wait_for_previous_kernel();
    for (int i = 0; i < first; ++i) load_tokens(i);
    // Stages are refilled two at a time: each weight row's next 256 contiguous bytes reach
    // DRAM together. With the 128-byte L2 promotion (encode_tiled), Gemma-7B at 1 token
    // takes 86.3 us after a clean flush against 97.6 one at a time with 256-byte
    // promotion (H100, 2026-11-27).
    constexpr int kBatch = 2;
    for (int i = kStages; i < blocks; i += kBatch) {
      const int n = min(kBatch, blocks - i);
      mbar_wait(&empty[(i + n - 1) % kStages], ((i + n - 1) / kStages - 1) & 1);
      for (int j = i; j < i + n; ++j) load_weights(j);
      for (int j = i; j < i + n; ++j) load_tokens(j);
    }
    return;
  }

  wait_for_previous_kernel();
  // This thread's tokens (acc_token of its elements 0, 1 and, at N = 16, 4, 5).
  constexpr int kR = kN / 2;
  constexpr int kTok = kN / 4;  // distinct tokens per thread
  int tok_off[kTok];
  bool tok_in[kTok];
#pragma unroll
  for (int j = 0; j < kTok; ++j) {
    const int t = acc_token(4 * (j / 2) + j % 2);
    tok_in[j] = t < p.M;
    tok_off[j] = tok_in[j] ? t : 0;
  }
  const float* sw0 = Tile::scales(p, 0) + kb0;
  const float* sw1 = Tile::scales(p, 1) + kb0;
  const float* sx = p.act_scale + int64_t(kb0) * p.ld_s;
  // Stage i's scales, loaded one stage ahead: their latency then hides under the wait.
  struct Scales {
    float w[2];
    float x[kTok];
  };
  auto load_scales = [&](int i, Scales& s) {
    s.w[0] = __ldg(sw0 + i);
    s.w[1] = __ldg(sw1 + i);
    if constexpr (!kQuantizeX) {
#pragma unroll
      for (int j = 0; j < kTok; ++j) s.x[j] = tok_in[j] ? __ldg(sx + int64_t(i) * p.ld_s + tok_off[j]) : 0.0f;
    }
  };
  float acc[2][kR] = {};
  Scales next;
  XQuantizer<kN, XT> xq;
  if (blocks > 0) {
    load_scales(0, next);
    if constexpr (kQuantizeX) xq.load(p, kb0);
  }
  for (int i = 0; i < blocks; ++i) {
    Scales cur = next;
    if (i + 1 < blocks) load_scales(i + 1, next);
    unsigned char* stage = ring + (i % kStages) * S::kStageBytes;
    if constexpr (kQuantizeX) {
      // The stage's tokens' box was last read by the wgmmas of stage i - kStages, retired.
      xq.store(stage + S::kTokensOffset, x_scales[i % 2]);
      if (i + 1 < blocks) xq.load(p, kb0 + i + 1);
      // The box's generic-proxy stores before the wgmmas' async-proxy reads; the scales
      // before every consumer's read (x_scales[i % 2] is written again at stage i + 2,
      // past the next barrier, which each thread reaches after its reads of these).
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      consumer_sync();
#pragma unroll
      for (int j = 0; j < kTok; ++j) cur.x[j] = x_scales[i % 2][tok_off[j]];
    }
    mbar_wait(&full[i % kStages], (i / kStages) & 1);
    const uint64_t a0 = sw128_desc(stage), a1 = sw128_desc(stage + kBoxBytes);
    const uint64_t b = sw128_desc(stage + S::kTokensOffset);
    float part[2][kR];
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int k = 0; k < kBlock / 32; ++k) wgmma<kN>(part[0], a0 + 2 * k, b + 2 * k, k);
#pragma unroll
    for (int k = 0; k < kBlock / 32; ++k) wgmma<kN>(part[1], a1 + 2 * k, b + 2 * k, k);
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    fence_registers(part[0]);
    fence_registers(part[1]);
    if (lane == 0) mbar_arrive(&empty[i % kStages]);  // the stage's reads have retired
#pragma unroll
    for (int box = 0; box < 2; ++box) {
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        const int j = 2 * (r / 4) + r % 2;
        acc[box][r] = fmaf(part[box][r], cur.w[box] * cur.x[j], acc[box][r]);
      }
    }
  }
  epilogue(acc);
}

// h = gelu(gate) * up for the block's 64 columns; the second block of each 128-column
// group quantizes it.
template <int kN, class Occ, bool kTanh, class XT>
__global__ void __launch_bounds__(kThreads, Occ::kBlocksPerSm)
    gate_up(const __grid_constant__ CUtensorMap wg, const __grid_constant__ CUtensorMap wu, const Params p) {
  __shared__ bool last;
  stream_tile<GateUpTile, kN, Occ::kStages, true, XT>(&wg, &wu, &wg, p, [&](float (&acc)[2][kN / 2]) {
    const int t = threadIdx.x;
    const int64_t H = p.rows, n0 = GateUpTile::row(0);
#pragma unroll
    for (int r = 0; r < kN / 2; ++r) {
      const int token = acc_token(r);
      if (token < p.M) __stcg(p.h + token * H + n0 + acc_row(r), geglu_cuda::gelu_ex2_rcp<kTanh>(acc[0][r]) * acc[1][r]);
    }
    const int64_t group = n0 / kBlock;
    consumer_sync();
    if (t == 0) {
      __threadfence();  // this block's h before its count (the other block reads it)
      last = atomicAdd(p.counters + group, 1) == kBlock / kBoxRows - 1;
    }
    consumer_sync();
    if (!last) return;
    __threadfence();
    if (t == 0) p.counters[group] = 0;
    // 16 threads per token, 8 columns each: amax over the 16, then q = e4m3(h / scale).
    const int l = t % 16;
    const int64_t col = group * kBlock + 8 * l;
    for (int token0 = 0; token0 < p.M; token0 += kConsumerThreads / 16) {
      const int token = token0 + t / 16;
      float v[8] = {};
      float amax = 0.0f;
      if (token < p.M) {
        const float4 lo = __ldcg(reinterpret_cast<const float4*>(p.h + token * H + col));
        const float4 hi = __ldcg(reinterpret_cast<const float4*>(p.h + token * H + col + 4));
        v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w, v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
#pragma unroll
        for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(v[i]));
      }
      const float scale = fp8_convert::group_scale(amax);
      if (token < p.M) {
        *reinterpret_cast<uint2*>(p.hq + token * H + col) = fp8_convert::quantize8(v, scale);
        if (l == 0) p.sh[group * p.ld_sh + token] = scale;
      }
    }
  });
}

// The block's split sums to the workspace; the last split of a row tile adds them up in
// split order with the residual. The MLP's down reads the e4m3 h by TMA (`act`); the
// linear (kQuantizeX) quantizes x, of the output's dtype T.
template <int kN, class T, bool kQuantizeX>
__global__ void __launch_bounds__(kThreads, TwoPerSm::kBlocksPerSm)
    down(const __grid_constant__ CUtensorMap wd, const __grid_constant__ CUtensorMap act, const Params p) {
  __shared__ bool last;
  stream_tile<DownTile, kN, TwoPerSm::kStages, kQuantizeX, T>(&wd, &wd, &act, p, [&](float (&acc)[2][kN / 2]) {
    const int t = threadIdx.x;
    const int64_t N = p.rows, n0 = DownTile::row(0);
    const int splits = int(gridDim.y);
    float* part = p.partials + int64_t(blockIdx.y) * p.M * N;
#pragma unroll
    for (int box = 0; box < 2; ++box) {
#pragma unroll
      for (int r = 0; r < kN / 2; ++r) {
        const int token = acc_token(r);
        if (token < p.M) __stcg(part + token * N + n0 + kBoxRows * box + acc_row(r), acc[box][r]);
      }
    }
    consumer_sync();
    if (t == 0) {
      __threadfence();
      last = atomicAdd(p.counters + blockIdx.x, 1) == splits - 1;
    }
    consumer_sync();
    if (!last) return;
    __threadfence();
    if (t == 0) p.counters[blockIdx.x] = 0;
    // 4 rows x every 4th token a thread, the splits summed in order (loads issued ahead).
    const int64_t col = n0 + 4 * (t % 32);
    for (int token = t / 32; token < p.M; token += kConsumerThreads / 32) {
      float4 y = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 8
      for (int s = 0; s < splits; ++s) {
        const float4 v = __ldcg(reinterpret_cast<const float4*>(p.partials + (int64_t(s) * p.M + token) * N + col));
        y.x += v.x, y.y += v.y, y.z += v.z, y.w += v.w;
      }
      const float sum[4] = {y.x, y.y, y.z, y.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float out = sum[e];
        if (p.residual) out += geglu_cuda::to_float(static_cast<const T*>(p.residual)[token * N + col + e]);
        static_cast<T*>(p.out)[token * N + col + e] = geglu_cuda::from_float<T>(out);
      }
    }
  });
}

// cuTensorMapEncodeTiled through the runtime's driver entry point (no -lcuda), found once.
CUresult encode_tiled(CUtensorMap* map, const void* base, uint64_t cols, uint64_t rows, uint32_t box_rows) {
  using Encode = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                              const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                              CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  static Encode encode = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found;
#if CUDART_VERSION >= 12050
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found);
#else
    const cudaError_t e = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &found);
#endif
    if (e == cudaSuccess && found == cudaDriverEntryPointSuccess) {
      encode = reinterpret_cast<Encode>(fn);
    }
    cudaGetLastError();
  });
  if (encode == nullptr) return CUDA_ERROR_NOT_FOUND;
  const cuuint64_t dims[2] = {cols, rows}, strides[1] = {cols};
  const cuuint32_t box[2] = {uint32_t(kBlock), box_rows}, elem_strides[2] = {1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(base), dims, strides, box, elem_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                // A box row is 128 bytes: a 256-byte promotion fetched the next K block's
                // bytes too, evicted (evict-first) before their own load came.
                CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

// The down projection's splits of its K blocks: as many blocks as fill the SMs once.
struct DownGrid {
  int tiles, splits, split_blocks;
};
DownGrid down_grid(int64_t H, int64_t N, int sm_count) {
  const int k_blocks = int(H / kBlock), tiles = int(N / (2 * kBoxRows));
  int splits = TwoPerSm::kBlocksPerSm * sm_count / tiles;
  splits = splits < 1 ? 1 : splits > k_blocks ? k_blocks : splits;
  const int split_blocks = (k_blocks + splits - 1) / splits;
  return DownGrid{tiles, (k_blocks + split_blocks - 1) / split_blocks, split_blocks};
}

int64_t h_bytes(int64_t M, int64_t H) { return (M * H * 4 + 15) / 16 * 16; }

// One block of kThreads per grid cell, as a programmatic dependent of the stream's last
// kernel; the first call of each kernel sets its shared-memory size.
template <auto kKernel, class... Args>
int launch(dim3 grid, int smem, cudaStream_t stream, Args... args) {
  static std::once_flag once;
  static cudaError_t attr = cudaSuccess;
  std::call_once(once, [&] { attr = cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem); });
  if (attr != cudaSuccess) {
    sm90_launcher::record_cuda_error(attr);
    return GEGLU_SM90_ERR_CUDA;
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = size_t(smem);
  config.stream = stream;
  cudaLaunchAttribute pdl[1];
  pdl[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  pdl[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = pdl;
  config.numAttrs = 1;
  const cudaError_t e = cudaLaunchKernelEx(&config, kKernel, args...);
  if (e != cudaSuccess) {
    sm90_launcher::record_cuda_error(e);
    return GEGLU_SM90_ERR_CUDA;
  }
  return GEGLU_SM90_OK;
}

bool aligned16(const void* v) { return (reinterpret_cast<uintptr_t>(v) & 15u) == 0; }
bool aligned4(const void* v) { return (reinterpret_cast<uintptr_t>(v) & 3u) == 0; }
bool size_ok(int64_t v) { return v >= kBlock && v % kBlock == 0 && v < (int64_t(1) << 31); }
bool ld_ok(int64_t ld, int64_t M) { return ld >= M && ld < (int64_t(1) << 31); }

}  // namespace fp8_decode

namespace fp8_decode {

template <int kN, class Occ, class XT>
int launch_gate_up(bool tanh, int tiles, cudaStream_t s, const CUtensorMap& g, const CUtensorMap& u,
                   const Params& p) {
  constexpr int smem = Ring<kN, Occ::kStages>::kSmemBytes;
  return tanh ? launch<gate_up<kN, Occ, true, XT>>(dim3(unsigned(tiles)), smem, s, g, u, p)
              : launch<gate_up<kN, Occ, false, XT>>(dim3(unsigned(tiles)), smem, s, g, u, p);
}

template <class XT>
int launch_gate_up(bool tanh, bool few, int M, int tiles, cudaStream_t s, const CUtensorMap& g,
                   const CUtensorMap& u, const Params& p) {
  if (M <= 8) {
    return few ? launch_gate_up<8, TwoPerSm, XT>(tanh, tiles, s, g, u, p)
               : launch_gate_up<8, ThreePerSm, XT>(tanh, tiles, s, g, u, p);
  }
  return few ? launch_gate_up<16, TwoPerSm, XT>(tanh, tiles, s, g, u, p)
             : launch_gate_up<16, ThreePerSm, XT>(tanh, tiles, s, g, u, p);
}

// The down kernel over weight `wd` [N, K], K-split to fill the GPU once; act: the e4m3
// activations' map (the MLP's h), or p.x quantized in the kernel (kQuantizeX).
template <bool kQuantizeX>
int launch_down(int device, const sm90_launcher::DeviceInfo* info, Params p, int64_t K, int64_t N, const CUtensorMap& map_w,
                const CUtensorMap& act, int dtype, int counter_offset, cudaStream_t s) {
  const DownGrid g = down_grid(K, N, info->sm_count);
  p.k_blocks = int(K / kBlock), p.split_blocks = g.split_blocks, p.rows = int(N);
  p.counters = tile_counters::get(device, s, counter_offset + g.tiles);
  if (p.counters == nullptr) return GEGLU_SM90_ERR_CUDA;
  p.counters += counter_offset;
  const dim3 grid(unsigned(g.tiles), unsigned(g.splits));
  const bool bf16 = dtype == GEGLU_SM90_BF16;
  if (p.M <= 8) {
    constexpr int smem = Ring<8, TwoPerSm::kStages>::kSmemBytes;
    return bf16 ? launch<down<8, __nv_bfloat16, kQuantizeX>>(grid, smem, s, map_w, act, p)
                : launch<down<8, __half, kQuantizeX>>(grid, smem, s, map_w, act, p);
  }
  constexpr int smem = Ring<16, TwoPerSm::kStages>::kSmemBytes;
  return bf16 ? launch<down<16, __nv_bfloat16, kQuantizeX>>(grid, smem, s, map_w, act, p)
              : launch<down<16, __half, kQuantizeX>>(grid, smem, s, map_w, act, p);
}

// x's rows as the in-kernel quantization loads them: 16-byte words (x itself 16-byte aligned).
bool x_stride_ok(int64_t ldx, int64_t K) { return ldx >= K && ldx % 8 == 0 && ldx < (int64_t(1) << 31); }

}  // namespace fp8_decode

extern "C" int64_t geglu_fp8_decode_workspace_bytes(int64_t M, int64_t H, int64_t N) {
  using namespace fp8_decode;
  int device = 0;
  const sm90_launcher::DeviceInfo* info = sm90_launcher::current_sm90_device(&device);
  if (info == nullptr || M <= 0 || !size_ok(H) || !size_ok(N)) return 0;
  const DownGrid grid = down_grid(H, N, info->sm_count);
  return h_bytes(M, H) + int64_t(grid.splits) * M * N * 4;
}

extern "C" int64_t geglu_fp8_decode_linear_workspace_bytes(int64_t M, int64_t K, int64_t N) {
  using namespace fp8_decode;
  int device = 0;
  const sm90_launcher::DeviceInfo* info = sm90_launcher::current_sm90_device(&device);
  if (info == nullptr || M <= 0 || !size_ok(K) || !size_ok(N)) return 0;
  return int64_t(down_grid(K, N, info->sm_count).splits) * M * N * 4;
}

extern "C" int geglu_fp8_decode_gate_up(const void* x, int64_t ldx, int64_t M, int64_t K, const void* wg,
                                        const float* sg, const void* wu, const float* su, int64_t H, void* hq,
                                        float* sh, int64_t ld_sh, int approximate, int dtype, void* workspace,
                                        void* stream) {
  using namespace fp8_decode;
  if (dtype != GEGLU_SM90_BF16 && dtype != GEGLU_SM90_FP16) return GEGLU_SM90_ERR_DTYPE;
  if (M < 0 || M > GEGLU_FP8_DECODE_MAX_M || !size_ok(K) || !size_ok(H) || !ld_ok(ld_sh, M)) {
    return GEGLU_SM90_ERR_SHAPE;
  }
  if (!x_stride_ok(ldx, K)) return GEGLU_SM90_ERR_STRIDE;
  if (!aligned16(x) || !aligned16(wg) || !aligned16(wu) || !aligned16(workspace) || !aligned16(hq) ||
      !aligned4(sg) || !aligned4(su) || !aligned4(sh)) {
    return GEGLU_SM90_ERR_ALIGN;
  }
  int device = 0;
  const sm90_launcher::DeviceInfo* info = sm90_launcher::current_sm90_device(&device);
  if (info == nullptr) return GEGLU_SM90_ERR_DEVICE;
  if (M == 0) return GEGLU_SM90_OK;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  CUtensorMap map_g, map_u;
  if (encode_tiled(&map_g, wg, K, H, kBoxRows) != CUDA_SUCCESS || encode_tiled(&map_u, wu, K, H, kBoxRows) != CUDA_SUCCESS) {
    return GEGLU_SM90_ERR_CUDA;
  }
  Params p = {};
  p.k_blocks = int(K / kBlock), p.split_blocks = p.k_blocks, p.M = int(M), p.rows = int(H);
  p.x = x, p.ld_x = ldx;
  p.s0 = sg, p.s1 = su;
  p.h = static_cast<float*>(workspace), p.hq = static_cast<uint8_t*>(hq), p.sh = sh, p.ld_sh = ld_sh;
  p.counters = tile_counters::get(device, s, H / kBlock);
  if (p.counters == nullptr) return GEGLU_SM90_ERR_CUDA;
  const int tiles = int(H / kBoxRows);
  const bool few = tiles <= TwoPerSm::kBlocksPerSm * info->sm_count;
  const bool tanh = approximate != 0;
  return dtype == GEGLU_SM90_BF16 ? launch_gate_up<__nv_bfloat16>(tanh, few, int(M), tiles, s, map_g, map_u, p)
                                  : launch_gate_up<__half>(tanh, few, int(M), tiles, s, map_g, map_u, p);
}

extern "C" int geglu_fp8_decode_down(const void* hq, const float* sh, int64_t ld_sh, int64_t M, int64_t H,
                                     const void* wd, const float* sd, int64_t N, const void* residual, void* out,
                                     int dtype, void* workspace, void* stream) {
  using namespace fp8_decode;
  if (dtype != GEGLU_SM90_BF16 && dtype != GEGLU_SM90_FP16) return GEGLU_SM90_ERR_DTYPE;
  if (M < 0 || M > GEGLU_FP8_DECODE_MAX_M || !size_ok(H) || !size_ok(N) || !ld_ok(ld_sh, M)) {
    return GEGLU_SM90_ERR_SHAPE;
  }
  if (!aligned16(hq) || !aligned16(wd) || !aligned16(workspace) || !aligned4(sh) || !aligned4(sd) ||
      out == nullptr || (reinterpret_cast<uintptr_t>(out) & 1u) || (reinterpret_cast<uintptr_t>(residual) & 1u)) {
    return GEGLU_SM90_ERR_ALIGN;
  }
  int device = 0;
  const sm90_launcher::DeviceInfo* info = sm90_launcher::current_sm90_device(&device);
  if (info == nullptr) return GEGLU_SM90_ERR_DEVICE;
  if (M == 0) return GEGLU_SM90_OK;
  CUtensorMap map_w, map_h;
  if (encode_tiled(&map_w, wd, H, N, kBoxRows) != CUDA_SUCCESS ||
      encode_tiled(&map_h, hq, H, M, M <= 8 ? 8 : 16) != CUDA_SUCCESS) {
    return GEGLU_SM90_ERR_CUDA;
  }
  Params p = {};
  p.M = int(M);
  p.act_scale = sh, p.ld_s = ld_sh;
  p.s0 = sd, p.s1 = sd;
  p.partials = reinterpret_cast<float*>(static_cast<char*>(workspace) + h_bytes(M, H));
  p.residual = residual, p.out = out;
  // Counters after the gate/up's, so that the two kernels never share one.
  return launch_down<false>(device, info, p, H, N, map_w, map_h, dtype, int(H / kBlock),
                            static_cast<cudaStream_t>(stream));
}

extern "C" int geglu_fp8_decode_linear(const void* x, int64_t ldx, int64_t M, int64_t K, const void* w,
                                       const float* sw, int64_t N, const void* residual, void* out, int dtype,
                                       void* workspace, void* stream) {
  using namespace fp8_decode;
  if (dtype != GEGLU_SM90_BF16 && dtype != GEGLU_SM90_FP16) return GEGLU_SM90_ERR_DTYPE;
  if (M < 0 || M > GEGLU_FP8_DECODE_MAX_M || !size_ok(K) || !size_ok(N)) return GEGLU_SM90_ERR_SHAPE;
  if (!x_stride_ok(ldx, K)) return GEGLU_SM90_ERR_STRIDE;
  if (!aligned16(x) || !aligned16(w) || !aligned16(workspace) || !aligned4(sw) || out == nullptr ||
      (reinterpret_cast<uintptr_t>(out) & 1u) || (reinterpret_cast<uintptr_t>(residual) & 1u)) {
    return GEGLU_SM90_ERR_ALIGN;
  }
  int device = 0;
  const sm90_launcher::DeviceInfo* info = sm90_launcher::current_sm90_device(&device);
  if (info == nullptr) return GEGLU_SM90_ERR_DEVICE;
  if (M == 0) return GEGLU_SM90_OK;
  CUtensorMap map_w;
  if (encode_tiled(&map_w, w, K, N, kBoxRows) != CUDA_SUCCESS) return GEGLU_SM90_ERR_CUDA;
  Params p = {};
  p.M = int(M);
  p.x = x, p.ld_x = ldx;
  p.s0 = sw, p.s1 = sw;
  p.partials = static_cast<float*>(workspace);
  p.residual = residual, p.out = out;
  // Its own counters (offset 0 as the gate/up's: the linear and an MLP's gate/up run one
  // after the other on a stream, each leaving its counters at 0).
  return launch_down<true>(device, info, p, K, N, map_w, map_w, dtype, 0, static_cast<cudaStream_t>(stream));
}
