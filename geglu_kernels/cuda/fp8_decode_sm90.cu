// The block-scaled FP8 GeGLU MLP at 1-4 tokens on Hopper (sm_90a): its two GEMMs as
// weight-streaming kernels, and their C launchers (fp8_mlp_sm90.h).
//
// At a few tokens the MLP is a weight read (Gemma-7B: 226 MB of e4m3 weights for 0.9
// GFLOP per token), so, as decode_sm90.cu does for bf16, blocks stream whole weight rows
// through a shared-memory ring with the math on the side:
// - Rows: a tile is 16 weight row segments, read in 1 KB chunks, 16 lanes of warp 0 each
//   issuing one bulk copy (cp.async.bulk) per chunk into a 2-stage ring (decode_sm90.cu
//   says why these choices), one block per tile; a stage is refilled as soon as the warps
//   have it in registers. Blocks start at staggered chunks of their rows. (A persistent
//   grid, each block streaming its tiles as one chunk sequence, was slower: 109.4 against
//   106.8 us on an H200 at Gemma-7B, 1 token.)
// - Math: swap-AB mma.sync m16n8k32 on e4m3, the 16 row segments as A, token segments as
//   B's 8 columns. A chunk is 1024 elements, so each of the 8 warps takes one
//   128-element piece, which is one 128-deep K block of the block-scaled format: its
//   products go to a zeroed accumulator that is then promoted into the running float32
//   sum with scale_w x scale_x (DeepGEMM's promotion, per piece). K is permuted per lane
//   as in decode_sm90.cu: lane (g, q) reads bytes 16q..16q+15 and 64+16q..64+16q+15 of the
//   piece, A rows and B columns alike, and feeds word 2s / 2s+1 to k-slots 4q.. / 16+4q..
//   of k32 step s.
// - gate/up (one K segment): A rows 0-7 are gate rows n0..n0+7, rows 8-15 the matching up
//   rows, so a tile owns h columns n0..n0+7 and forms h = gelu(gate) * up in float32. A
//   128-column group of h (the unit of its quantization) spans 16 tiles: each stores its
//   h to a float32 workspace and counts itself on the group's counter; the last of the 16
//   quantizes the group for every token (1x128, as fp8_mlp_sm90.h states) and sets the
//   counter back to 0.
// - down: A row s * 8 + u is segment s of output row n0 + u (K cut in two, twice the
//   tiles), B column s * M + t token t's segment s (so M <= 4); the residual is added in
//   float32.
// - Each kernel is launched as a programmatic dependent of the one before it (PDL): it
//   issues its first weight chunks (which no earlier kernel writes) before
//   griddepcontrol.wait, so the weight stream starts under the previous kernel's tail.
//   The op's first kernel (x's quantization) is launched normally.
// Where it stands (docs/DESIGN.md, "The FP8 decode kernels"): ahead of the block-scaled
// GEMMs at 1-4 tokens, 1.4-2x the weight-read floor. Hopper has no FP8 mma.sync: ptxas
// emulates m16n8k32 e4m3 with 12 e4m3-to-f16 unpacks and 2 f16 HMMAs, and even without any
// math the ring reads the gate/up weights at about half the copy rate.
// Build: part of the geglu_gemm_sm90 kernel (build.toml), sm_90a.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "bulk_copy_ring.cuh"
#include "fp8_convert.cuh"
#include "fp8_mlp_sm90.h"
#include "gelu_math.cuh"
#include "sm90_launcher.cuh"
#include "tile_counters.h"
#include "vec.cuh"

namespace fp8_decode {

using namespace bulk_copy_ring;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kBlock = 128;                 // the format's block: K elements per scale
constexpr int kChunk = kWarps * kBlock;     // bytes (= elements) of each of the 16 rows per stage
constexpr int kStages = 2;
constexpr int kRowPitch = kChunk + 16;      // the 16-byte skew spreads the banks
constexpr int kStageBytes = 16 * kRowPitch;
constexpr int kRingBytes = kStages * kStageBytes;  // 33,280: under the 48 KB default

// D += A B on the tensor cores, m16n8k32, e4m3 operands, float32 accumulators.
__device__ __forceinline__ void mma_e4m3(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void wait_for_previous_kernel() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void allow_next_kernel() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }

struct Params {
  const uint8_t* act;       // quantized activations [M, K] e4m3 (x or h), rows contiguous
  const float* act_scale;   // their scales, [K / 128, ld_s] (M-major)
  int64_t ld_s;
  const uint8_t* w0;        // gate (gate/up) or down weights [rows, K]
  const float* s0;          // and their 128x128 block scales [rows / 128, K / 128]
  const uint8_t* w1;        // up (gate/up only)
  const float* s1;
  int K, seg_len, M, rows;  // rows: of w0 (H or N)
  float* h;                 // gate/up: [M, H] float32 workspace
  uint8_t* hq;              //          [M, H] e4m3
  float* sh;                //          [H / 128, ld_sh]
  int64_t ld_sh;
  int* counters;            //          [H / 128], zero between calls
  const void* residual;     // down: [M, N] or null
  void* out;                //       [M, N]
};

// Which weight row segment is A row i (i < 16) of the block owning output rows n0..
struct GateUpRows {
  static constexpr int kSplit = 1;
  static constexpr int kOutRows = 8;  // h columns: 8 gate rows and their 8 up rows
  __device__ static int seg(int) { return 0; }
  __device__ static const uint8_t* src(const Params& p, int64_t n0, int i) {
    return i < 8 ? p.w0 + (n0 + i) * p.K : p.w1 + (n0 + i - 8) * p.K;
  }
  __device__ static const float* scales(const Params& p, int64_t n0, int i) {
    return (i < 8 ? p.s0 : p.s1) + (n0 / kBlock) * (p.K / kBlock);
  }
};
// Down: K cut into two segments (twice the tiles), A row s * 8 + u = segment s of row n0 + u.
struct DownRows {
  static constexpr int kSplit = 2;
  static constexpr int kOutRows = 16 / kSplit;
  __device__ static int seg(int i) { return i / kOutRows; }
  __device__ static const uint8_t* src(const Params& p, int64_t n0, int i) {
    return p.w0 + (n0 + i % kOutRows) * p.K + int64_t(i / kOutRows) * p.seg_len;
  }
  __device__ static const float* scales(const Params& p, int64_t n0, int) {
    return p.s0 + (n0 / kBlock) * (p.K / kBlock);
  }
};

// Segment s's length along K (seg_len: a multiple of 128).
__device__ __forceinline__ int seg_len(const Params& p, int s) { return max(0, min(p.seg_len, p.K - s * p.seg_len)); }

using WarpSums = float[kWarps][4][32];

// The sum over the warps of C[row][col] (row < 16, col < 8).
__device__ __forceinline__ float block_sum(const WarpSums& sums, int row, int col) {
  const int reg = (row >= 8 ? 2 : 0) + col % 2, lane = 4 * (row % 8) + col / 2;
  float sum = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) sum += sums[w][reg][lane];
  return sum;
}

// The weight stream and the math: block b streams tile b's 16 row segments (output rows
// b * kOutRows..) through the ring into the mma. After the last chunk the warps'
// float32 sums (sums[warp][0..3][lane] = C[g][2q], C[g][2q + 1], C[8 + g][2q], C[8 + g][2q +
// 1]) go to shared memory and `epilogue(n0, sums)` runs in every
// thread.
template <class Rows, class Epilogue>
__device__ __forceinline__ void stream_tile(const Params& p, Epilogue&& epilogue) {
  extern __shared__ __align__(128) unsigned char ring[];
  __shared__ __align__(8) uint64_t full[kStages];
  __shared__ WarpSums warp_sums;
  constexpr int kSplit = Rows::kSplit;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, q = lane % 4;
  const int chunks = (p.seg_len + kChunk - 1) / kChunk;
  const int64_t n0 = int64_t(blockIdx.x) * Rows::kOutRows;
  if (threadIdx.x == 0) {
    for (int i = 0; i < kStages; ++i) mbar_init(&full[i], 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  // Blocks start at different chunks of their rows (and wrap around): blocks that run at
  // once then read addresses spread over the rows (decode_sm90.cu).
  auto chunk_k = [&](int c) {
    const int first = int(blockIdx.x % unsigned(chunks));
    return (c + first < chunks ? c + first : c + first - chunks) * kChunk;
  };
  // Warp 0, lane i < 16: chunk c of A row i into its stage.
  const int src_len = warp == 0 && lane < 16 ? seg_len(p, Rows::seg(lane)) : 0;
  auto issue = [&](int c) {
    const int k0 = chunk_k(c);
    uint64_t* bar = &full[c % kStages];
    const int bytes = min(kChunk, src_len - k0);
    if (bytes > 0) {
      const uint8_t* src = Rows::src(p, n0, lane);
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // the warps' reads before the async writes
      mbar_expect_tx(bar, uint32_t(bytes));
      bulk_copy(ring + (c % kStages) * kStageBytes + lane * kRowPitch, src + k0, uint32_t(bytes), bar);
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(bar);
  };
  if (warp == 0) {
    for (int c = 0; c < kStages && c < chunks; ++c) issue(c);
  }
  allow_next_kernel();
  wait_for_previous_kernel();  // the activations come from the kernel before

  // This lane's A rows g and 8 + g: their segments' lengths and K-block offsets.
  const int seg_a0 = Rows::seg(g), seg_a1 = Rows::seg(8 + g);
  const int len_a0 = seg_len(p, seg_a0), len_a1 = seg_len(p, seg_a1);
  const int kb_a0 = seg_a0 * (p.seg_len / kBlock), kb_a1 = seg_a1 * (p.seg_len / kBlock);
  // B column g: token g % M's segment g / M (none past kSplit M); C columns 2q + e: their
  // scales' offsets and segment lengths (0: none).
  const int b_seg = g / p.M;
  const int xb_len = b_seg < kSplit ? seg_len(p, b_seg) : 0;
  const uint8_t* xb = p.act + (b_seg < kSplit ? int64_t(g - b_seg * p.M) * p.K + int64_t(b_seg) * p.seg_len : int64_t(0));
  int sx_off[2], sx_len[2];
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int cc = 2 * q + e, sc = cc / p.M;
    sx_len[e] = sc < kSplit ? seg_len(p, sc) : 0;
    sx_off[e] = sc < kSplit ? sc * (p.seg_len / kBlock) * int(p.ld_s) + (cc - sc * p.M) : 0;
  }
  const uint4 zero = make_uint4(0, 0, 0, 0);
  const int e0 = warp * kBlock;  // this warp's piece of each chunk: one K block
  // Chunk c's token words and scales, loaded one chunk ahead of their use: the L1/L2
  // latency then overlaps the wait for the weights.
  struct Operands {
    uint4 b[2];
    float sx[2];
    float sw[2];
  };
  auto load = [&](int c, Operands& o) {
    const int k = chunk_k(c) + e0, kb = k / kBlock;
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      o.b[s] = k < xb_len ? __ldg(reinterpret_cast<const uint4*>(xb + k + 16 * q + 64 * s)) : zero;
      o.sx[s] = k < sx_len[s] ? __ldg(p.act_scale + sx_off[s] + int64_t(kb) * p.ld_s) : 0.0f;
    }
    o.sw[0] = k < len_a0 ? __ldg(Rows::scales(p, n0, g) + kb_a0 + kb) : 0.0f;
    o.sw[1] = k < len_a1 ? __ldg(Rows::scales(p, n0, 8 + g) + kb_a1 + kb) : 0.0f;
  };
  Operands next;
  load(0, next);
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int c = 0; c < chunks; ++c) {
    const Operands cur = next;
    if (c + 1 < chunks) load(c + 1, next);
    mbar_wait(&full[c % kStages], (c / kStages) & 1);
    const unsigned char* stage = ring + (c % kStages) * kStageBytes;
    const int k = chunk_k(c) + e0;
    uint4 a[2][2];  // [A rows g, 8 + g][word]
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      // Lengths are multiples of 128: a warp's piece is all in or all out.
      a[0][s] = k < len_a0 ? *reinterpret_cast<const uint4*>(stage + g * kRowPitch + e0 + 16 * q + 64 * s) : zero;
      a[1][s] = k < len_a1 ? *reinterpret_cast<const uint4*>(stage + (g + 8) * kRowPitch + e0 + 16 * q + 64 * s) : zero;
    }
    // The stage is in registers: refill it now, under this chunk's math.
    __syncthreads();
    if (warp == 0 && c + kStages < chunks) issue(c + kStages);
    float piece[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // this K block's products
#pragma unroll
    for (int step = 0; step < 4; ++step) {
      const int s = step / 2, w = (step % 2) * 2;
      mma_e4m3(piece, word(a[0][s], w), word(a[1][s], w), word(a[0][s], w + 1), word(a[1][s], w + 1),
               word(cur.b[s], w), word(cur.b[s], w + 1));
    }
    // Promoted with scale_w x scale_x (C columns 2q, 2q + 1).
    acc[0] = fmaf(piece[0], cur.sw[0] * cur.sx[0], acc[0]);
    acc[1] = fmaf(piece[1], cur.sw[0] * cur.sx[1], acc[1]);
    acc[2] = fmaf(piece[2], cur.sw[1] * cur.sx[0], acc[2]);
    acc[3] = fmaf(piece[3], cur.sw[1] * cur.sx[1], acc[3]);
  }
#pragma unroll
  for (int r = 0; r < 4; ++r) warp_sums[warp][r][lane] = acc[r];
  __syncthreads();
  epilogue(n0, warp_sums);
}

// Three blocks per SM (80 registers a thread, no spills): 6 ring stages of 16 KB in
// flight per SM.
constexpr int kBlocksPerSm = 3;
static_assert(GEGLU_FP8_DECODE_MAX_M * 2 <= 8, "the down projection's two segments of M tokens fill B's 8 columns");

// Per tile: thread t < 8 M forms h[t / 8][n0 + t % 8]; then the last of the group's 16
// tiles quantizes the group.
template <bool kTanh>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm) gate_up(const Params p) {
  constexpr int kTilesPerGroup = kBlock / GateUpRows::kOutRows;
  __shared__ bool last;
  stream_tile<GateUpRows>(p, [&](int64_t n0, const WarpSums& sums) {
    const int t = threadIdx.x;
    const int64_t H = p.rows;
    if (t < GateUpRows::kOutRows * p.M) {
      const int u = t % GateUpRows::kOutRows, token = t / GateUpRows::kOutRows;
      const float gate = block_sum(sums, u, token), up = block_sum(sums, 8 + u, token);
      __stcg(p.h + token * H + n0 + u, geglu_cuda::gelu_ex2_rcp<kTanh>(gate) * up);
    }
    const int64_t group = n0 / kBlock;
    __syncthreads();
    if (t == 0) {
      __threadfence();  // this tile's h before its count (the last tile's block reads it)
      last = atomicAdd(p.counters + group, 1) == kTilesPerGroup - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    // 16 threads per token, 8 columns each: amax over the 16, then q = e4m3(h / scale).
    const int token = t / 16, l = t % 16;
    const int64_t col = group * kBlock + 8 * l;
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
    if (t == 0) p.counters[group] = 0;
    if (token >= p.M) return;
    *reinterpret_cast<uint2*>(p.hq + token * H + col) = fp8_convert::quantize8(v, scale);
    if (l == 0) p.sh[group * p.ld_sh + token] = scale;
  });
}

// Per tile: thread t < kOutRows M finishes out[t / kOutRows][n0 + t % kOutRows], the
// segments' sums + residual.
template <class Rows, class T>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm) down(const Params p) {
  stream_tile<Rows>(p, [&](int64_t n0, const WarpSums& sums) {
    const int t = threadIdx.x;
    if (t >= Rows::kOutRows * p.M) return;
    const int u = t % Rows::kOutRows, token = t / Rows::kOutRows;
    const int64_t N = p.rows, col = n0 + u;
    float y = 0.0f;
#pragma unroll
    for (int s = 0; s < Rows::kSplit; ++s) y += block_sum(sums, s * Rows::kOutRows + u, s * p.M + token);
    if (p.residual) y += geglu_cuda::to_float(static_cast<const T*>(p.residual)[token * N + col]);
    static_cast<T*>(p.out)[token * N + col] = geglu_cuda::from_float<T>(y);
  });
}

using Kernel = void (*)(Params);

// K cut into `split` segments of whole 128-element blocks.
int segment_length(int64_t K, int split) { return int((K / kBlock + split - 1) / split * kBlock); }

// One block per tile (tiles = rows / rows_per_block < 2^28).
template <Kernel kernel>
int launch(int rows_per_block, Params p, cudaStream_t stream) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(unsigned(p.rows / rows_per_block));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = kRingBytes;
  config.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attr;
  config.numAttrs = 1;
  const cudaError_t e = cudaLaunchKernelEx(&config, kernel, p);
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

extern "C" int geglu_fp8_decode_gate_up(const void* xq, const float* sx, int64_t ld_sx, int64_t M, int64_t K,
                                        const void* wg, const float* sg, const void* wu, const float* su, int64_t H,
                                        float* h, void* hq, float* sh, int64_t ld_sh, int approximate,
                                        void* stream) {
  using namespace fp8_decode;
  if (M < 0 || M > GEGLU_FP8_DECODE_MAX_M || !size_ok(K) || !size_ok(H) || !ld_ok(ld_sx, M) || !ld_ok(ld_sh, M)) {
    return GEGLU_SM90_ERR_SHAPE;
  }
  if (!aligned16(xq) || !aligned16(wg) || !aligned16(wu) || !aligned16(h) || !aligned16(hq) || !aligned4(sx) ||
      !aligned4(sg) || !aligned4(su) || !aligned4(sh)) {
    return GEGLU_SM90_ERR_ALIGN;
  }
  int device = 0;
  if (sm90_launcher::current_sm90_device(&device) == nullptr) return GEGLU_SM90_ERR_DEVICE;
  if (M == 0) return GEGLU_SM90_OK;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  Params p = {};
  p.act = static_cast<const uint8_t*>(xq);
  p.act_scale = sx;
  p.ld_s = ld_sx;
  p.w0 = static_cast<const uint8_t*>(wg), p.s0 = sg;
  p.w1 = static_cast<const uint8_t*>(wu), p.s1 = su;
  p.K = int(K), p.seg_len = segment_length(K, GateUpRows::kSplit), p.M = int(M), p.rows = int(H);
  p.h = h, p.hq = static_cast<uint8_t*>(hq), p.sh = sh, p.ld_sh = ld_sh;
  p.counters = tile_counters::get(device, s, H / kBlock);
  if (p.counters == nullptr) return GEGLU_SM90_ERR_CUDA;
  constexpr int rows = GateUpRows::kOutRows;
  return approximate != 0 ? launch<gate_up<true>>(rows, p, s) : launch<gate_up<false>>(rows, p, s);
}

extern "C" int geglu_fp8_decode_down(const void* hq, const float* sh, int64_t ld_sh, int64_t M, int64_t H,
                                     const void* wd, const float* sd, int64_t N, const void* residual, void* out,
                                     int dtype, void* stream) {
  using namespace fp8_decode;
  if (dtype != GEGLU_SM90_BF16 && dtype != GEGLU_SM90_FP16) return GEGLU_SM90_ERR_DTYPE;
  if (M < 0 || M > GEGLU_FP8_DECODE_MAX_M || !size_ok(H) || !size_ok(N) || !ld_ok(ld_sh, M)) {
    return GEGLU_SM90_ERR_SHAPE;
  }
  if (!aligned16(hq) || !aligned16(wd) || !aligned4(sh) || !aligned4(sd) || out == nullptr ||
      (reinterpret_cast<uintptr_t>(out) & 1u) || (reinterpret_cast<uintptr_t>(residual) & 1u)) {
    return GEGLU_SM90_ERR_ALIGN;
  }
  int device = 0;
  if (sm90_launcher::current_sm90_device(&device) == nullptr) return GEGLU_SM90_ERR_DEVICE;
  if (M == 0) return GEGLU_SM90_OK;
  Params p = {};
  p.act = static_cast<const uint8_t*>(hq);
  p.act_scale = sh;
  p.ld_s = ld_sh;
  p.w0 = static_cast<const uint8_t*>(wd), p.s0 = sd;
  p.K = int(H), p.M = int(M), p.rows = int(N);
  p.residual = residual, p.out = out;
  p.seg_len = segment_length(H, DownRows::kSplit);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  constexpr int rows = DownRows::kOutRows;
  return dtype == GEGLU_SM90_BF16 ? launch<down<DownRows, __nv_bfloat16>>(rows, p, s)
                                  : launch<down<DownRows, __half>>(rows, p, s);
}
