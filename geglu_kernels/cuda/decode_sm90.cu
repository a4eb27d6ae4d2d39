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
constexpr int kChunk = 512;                  // K elements of each of the 16 rows per stage
constexpr int kStages = 2;
constexpr int kRowPitch = kChunk * 2 + 16;   // bytes: the 16-byte skew spreads the banks
constexpr int kStageBytes = 16 * kRowPitch;
constexpr int kRingBytes = kStages * kStageBytes;  // 33,280: under the 48 KB default
static_assert(kRingBytes + 4096 + 128 <= 48 * 1024, "ring and static shared memory within the default limit");
static_assert(kChunk == kWarps * 64, "each warp takes one 64-element piece of a chunk");

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
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
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

// Which weight row segments are the 16 rows of the mma's A operand, and which token
// segments its 8 B columns. Each weight row is cut along K into kSplit segments of
// seg_len elements (the last one shorter), and kGroups weight matrices are read side by
// side (gate/up: w_gate and w_up; the linear: one). A row s * (16 / kSplit) + g * U + u
// is segment s of unit u's row in matrix g (U = 16 / (kSplit * kGroups) output units per
// block), and B column s * M + t is token t's segment s (M <= 8 / kSplit). Only products
// of matching segments are read (summed over s): the others fill columns of the
// instruction that a decode step leaves empty anyway.
// - gate/up, kSplit = 1: 8 hidden units, gate rows 0-7 and up rows 8-15.
// - linear (the down projection), kSplit = 2: 8 output rows, so the grid has twice the
//   blocks of a 16-row tile, and no reduction crosses blocks (Gemma-7B: 384 blocks, all
//   resident at once on 132 SMs).
template <int kSplit, int kGroups>
struct Layout {
  static constexpr int kSegRows = 16 / kSplit;       // A rows per segment
  static constexpr int kUnits = kSegRows / kGroups;  // output units per block
  static constexpr int kMaxM = 8 / kSplit;           // tokens that fit B's 8 columns
  __device__ static int seg(int i) { return i / kSegRows; }
  __device__ static int group(int i) { return i % kSegRows / kUnits; }
  __device__ static int unit(int i) { return i % kUnits; }
  __device__ static int a_row(int s, int group, int unit) { return s * kSegRows + group * kUnits + unit; }
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

// The weight stream and the math shared by both kernels: the block's 16 row segments
// through the ring into the mma. Returns the warps' float32 sums over the whole K
// (warp_sums[warp][0..3][lane] = C[g][2q], C[g][2q + 1], C[8 + g][2q], C[8 + g][2q + 1]),
// visible to the whole block.
template <class T, int kSplit, int kGroups>
__device__ __forceinline__ const float (*stream_rows(const Params& p, int64_t row0))[4][32] {
  using L = Layout<kSplit, kGroups>;
  extern __shared__ __align__(128) unsigned char ring[];
  __shared__ __align__(8) uint64_t full[kStages];
  __shared__ float warp_sums[kWarps][4][32];
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
  // Warp 0 fills the stages, lane i < 16 copying A row i: its source row segment (null
  // past `rows`; the math zeroes what rows and segments not copied would hold). Sixteen
  // lanes each issue one copy, where one thread issuing all 16 per stage put its
  // address arithmetic between the stage's release and its refill every time (Gemma-7B
  // down projection: 55.5 us through one thread's loop, 40.2 with sixteen lanes).
  const T* src = nullptr;
  int src_len = 0;
  if (warp == 0 && lane < 16 && row0 + L::unit(lane) < p.rows) {
    src = static_cast<const T*>(L::group(lane) == 1 ? p.w[1] : p.w[0]) + (row0 + L::unit(lane)) * p.ldw +
          int64_t(L::seg(lane)) * p.seg_len;
    src_len = seg_len(p, L::seg(lane));
  }
  // Warp 0: chunk c of the 16 row segments into its stage. Each lane adds its bytes to
  // the stage's expected count before its copy; lane 0 arrives once all have.
  auto issue = [&](int c) {
    const int k0 = chunk_k(c);
    uint64_t* bar = &full[c % kStages];
    const int elems = min(kChunk, src_len - k0);
    if (src != nullptr && elems > 0) {
      const uint32_t bytes = uint32_t(elems) * sizeof(T);
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // the warps' reads before the async writes
      mbar_expect_tx(bar, bytes);
      bulk_copy(ring + (c % kStages) * kStageBytes + lane * kRowPitch, src + k0, bytes, bar);
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(bar);
  };
  if (warp == 0) {
    for (int c = 0; c < kStages && c < chunks; ++c) issue(c);
  }
  // This lane's A rows g and 8 + g hold K up to len_a0 / len_a1 of their segments.
  static_assert(L::kSegRows >= 8, "A rows 0-7 lie in segment 0");
  const int len_a0 = seg_len(p, 0), len_a1 = seg_len(p, L::seg(8));
  // B column g: token g % M's segment g / M.
  const int b_seg = kSplit == 1 ? (g < p.M ? 0 : 1) : g / p.M;
  const bool has_token = b_seg < kSplit;
  const int x_len = has_token ? seg_len(p, b_seg) : 0;
  const T* x = static_cast<const T*>(p.x) +
               (has_token ? (g - b_seg * p.M) * p.ldx + int64_t(b_seg) * p.seg_len : int64_t(0));
  const uint4 zero = make_uint4(0, 0, 0, 0);
  const int e0 = warp * 64;  // this warp's 64 elements of each chunk
  // The tokens' words for chunk c, loaded one chunk ahead of their use: an L1 miss then
  // overlaps the wait for the weights instead of following it (the down projection's
  // token rows, 48 KB at Gemma-7B, miss L1: 46.4 us loading after the wait, 40.3 ahead).
  auto load_tokens = [&](int c, uint4 (&b)[2]) {
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const int k = chunk_k(c) + e0 + 8 * q + 32 * s;
      b[s] = k < x_len ? __ldg(reinterpret_cast<const uint4*>(x + k)) : zero;
    }
  };
  // The gate/up's tokens stay in L1 (a few KB, read by every block): there the 8
  // registers the prefetch holds cost more occupancy than the prefetch saves, and each
  // chunk's words are loaded just before the wait for its stage instead (after it, the
  // L1 latency was half of the kernel's stalls, ncu; before it, Gemma-2-2B 25.0 us against
  // 25.9, Gemma-7B 76.0 against 76.6).
  constexpr bool kPrefetchTokens = kGroups == 1;
  uint4 b_next[2];
  if (kPrefetchTokens) load_tokens(0, b_next);
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int c = 0; c < chunks; ++c) {
    uint4 b[2];
    if (kPrefetchTokens) {
      b[0] = b_next[0], b[1] = b_next[1];
      if (c + 1 < chunks) load_tokens(c + 1, b_next);
    } else {
      load_tokens(c, b);  // in flight during the wait
    }
    mbar_wait(&full[c % kStages], (c / kStages) & 1);
    const unsigned char* stage = ring + (c % kStages) * kStageBytes;
    uint4 a[2][2];  // [A rows g, 8 + g][word]
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const int e = e0 + 8 * q + 32 * s, k = chunk_k(c) + e;
      // Lengths are multiples of 8: a 16-byte word is all in or all out.
      a[0][s] = k < len_a0 ? *reinterpret_cast<const uint4*>(stage + g * kRowPitch + e * 2) : zero;
      a[1][s] = k < len_a1 ? *reinterpret_cast<const uint4*>(stage + (g + 8) * kRowPitch + e * 2) : zero;
    }
#pragma unroll
    for (int step = 0; step < 4; ++step) {
      const int s = step / 2, w = (step % 2) * 2;
      mma_m16n8k16<T>(acc, word(a[0][s], w), word(a[1][s], w), word(a[0][s], w + 1), word(a[1][s], w + 1),
                      word(b[s], w), word(b[s], w + 1));
    }
    __syncthreads();  // every warp is done with the stage
    if (warp == 0 && c + kStages < chunks) issue(c + kStages);
  }
#pragma unroll
  for (int r = 0; r < 4; ++r) warp_sums[warp][r][lane] = acc[r];
  __syncthreads();
  return warp_sums;
}

// warp_sums' sum over the warps of C[row][col] (row < 16, col < 8).
__device__ __forceinline__ float block_sum(const float (*warp_sums)[4][32], int row, int col) {
  const int reg = (row >= 8 ? 2 : 0) + col % 2, lane = 4 * (row % 8) + col / 2;
  float sum = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) sum += warp_sums[w][reg][lane];
  return sum;
}

// Output unit r's sum for token t over matrix `group`: its segments' sums.
template <int kSplit, int kGroups>
__device__ __forceinline__ float unit_sum(const float (*warp_sums)[4][32], int group, int r, int t, int M) {
  using L = Layout<kSplit, kGroups>;
  float sum = 0.0f;
#pragma unroll
  for (int s = 0; s < kSplit; ++s) sum += block_sum(warp_sums, L::a_row(s, group, r), s * M + t);
  return sum;
}

// The output this thread finishes in the epilogue: threads 0..U*kMaxM-1 take one (unit
// unit0 + r, token) each; false for the rest and for outputs past M or `rows`.
template <class L>
__device__ __forceinline__ bool epilogue_output(const Params& p, int64_t unit0, int& r, int& token) {
  if (threadIdx.x >= L::kUnits * L::kMaxM) return false;
  token = threadIdx.x % L::kMaxM, r = threadIdx.x / L::kMaxM;
  return token < p.M && unit0 + r < p.rows;
}

// Six blocks per SM, the most the ring's shared memory allows (40 registers). K is not
// cut: 4 hidden units per block over halves of K ran slower at every Gemma shape and
// token count (Gemma-7B, 1 token: 83.3 us against 76.1; results/h200/decode2/attempts/),
// more blocks each paying the ring's start-up.
template <class T, bool kTanh>
__global__ void __launch_bounds__(kThreads, 6) decode_gate_up(const Params p) {
  using geglu_cuda::to_float;
  constexpr int kSplit = 1;
  using L = Layout<kSplit, 2>;
  const int64_t unit0 = int64_t(blockIdx.x) * L::kUnits;
  const auto warp_sums = stream_rows<T, kSplit, 2>(p, unit0);
  int r, token;
  if (!epilogue_output<L>(p, unit0, r, token)) return;
  const int64_t col = unit0 + r;
  float gate = unit_sum<kSplit, 2>(warp_sums, 0, r, token, p.M);
  float up = unit_sum<kSplit, 2>(warp_sums, 1, r, token, p.M);
  if (p.bias[0]) gate += to_float(static_cast<const T*>(p.bias[0])[col]);
  if (p.bias[1]) up += to_float(static_cast<const T*>(p.bias[1])[col]);
  static_cast<T*>(p.out)[token * p.ldo + col] = geglu_cuda::from_float<T>(geglu_cuda::gelu<kTanh>(gate) * up);
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
  const auto warp_sums = stream_rows<T, kLinearSplit, 1>(p, row0);
  int r, token;
  if (!epilogue_output<L>(p, row0, r, token)) return;
  const int64_t col = row0 + r;
  float y = unit_sum<kLinearSplit, 1>(warp_sums, 0, r, token, p.M);
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

int launch(Kernel kernel, int units_per_block, Params p, void* stream) {
  int device = 0;
  if (sm90_launcher::current_sm90_device(&device) == nullptr) return GEGLU_SM90_ERR_DEVICE;
  if (p.M == 0) return GEGLU_SM90_OK;
  void* args[] = {&p};
  const unsigned blocks = unsigned((p.rows + units_per_block - 1) / units_per_block);  // < 2^29
  const cudaError_t e = cudaLaunchKernel(reinterpret_cast<const void*>(kernel), dim3(blocks), dim3(kThreads), args,
                                         kRingBytes, static_cast<cudaStream_t>(stream));
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
  const Kernel kernels[4] = {decode_gate_up<__nv_bfloat16, false>, decode_gate_up<__nv_bfloat16, true>,
                             decode_gate_up<__half, false>, decode_gate_up<__half, true>};
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
  return launch(kernels[index], Layout<1, 2>::kUnits, p, stream);
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
  return launch(kernel, Layout<kLinearSplit, 1>::kUnits, p, stream);
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
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, decode_linear<__nv_bfloat16>, kThreads, kRingBytes);
    if (e != cudaSuccess) {
      sm90_launcher::record_cuda_error(e);
      return 0;
    }
    max_n = int64_t(per_sm) * info->sm_count * Layout<kLinearSplit, 1>::kUnits;
    known[device].store(max_n, std::memory_order_relaxed);
  }
  return max_n;
}
