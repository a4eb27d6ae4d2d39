// The down projection of a GeGLU MLP at 1..4 tokens on Hopper (a linear with bias and
// residual, weight-streaming), and its C launchers (decode_sm90.h).
//
// At a few tokens a GEMM is a weight read (Gemma-7B's down projection: 151 MB of weights
// for 0.08 GFLOP per token), so the kernel streams weights with the math on the side:
// - Rows: a block reads 16 weight row segments (which ones: kSplit below). Warp 0 streams
//   them in 512-element chunks, one-dimensional bulk copies (cp.async.bulk, the TMA
//   engine without a tensor map) of each segment's 1 KB chunk into a 2-stage
//   shared-memory ring, each stage completing on an mbarrier. Whole 1 KB row segments
//   per request read at a steady rate whatever ran before; 16-byte pieces loaded straight
//   into registers read more DRAM bytes than the weights after other kernels. Two stages,
//   not three or four: the ring's shared memory comes out of L1, where the token rows
//   must stay (four were slower; docs/DESIGN.md, "The decode kernels").
// - Math: swap-AB mma.sync m16n8k16, the 16 row segments as the A operand and up to 8
//   token segments as the B operand's columns. K is permuted per lane: a dot product may
//   sum its K in any order as long as both operands use the same one, so lane (g, q) =
//   (lane / 4, lane % 4) reads elements 8q..8q+7 and 32+8q..32+8q+7 of a 64-element piece
//   as 16-byte words and feeds element 4s..4s+3 to the fragment slots of k = 2q, 2q+1,
//   2q+8, 2q+9 of k16 step s. The tokens are read from global memory (L1) with the same
//   permutation. Rows are 16 bytes longer than a chunk in shared memory, so a warp's
//   fragment reads hit every bank equally (4 wavefronts per 512 bytes, the minimum).
// - The 8 warps split each chunk (64 elements each) and add their sums in shared memory
//   at the end; the epilogue (bias and residual) runs in float32 with one rounding.
//
// (The swap-AB CUTLASS kernel, geglu_swapab_sm90.cu, serves the gate/up at these token
// counts: it beat a gate/up of this design.) Measured against cuBLAS: docs/DESIGN.md,
// "The decode kernels". Build: part of the geglu_gemm_sm90 kernel
// (build.toml), sm_90a.

#include "sm90/decode/decode_sm90.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "sm90/decode/bulk_copy_ring.cuh"
#include "sm90/common/sm90_launcher.cuh"
#include "activation/vec.cuh"

namespace geglu_decode {

using namespace bulk_copy_ring;

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

// Which weight row segments are the 16 rows of the mma's A operand, and which token
// segments its 8 B columns. Each weight row is cut along K into kSplit = 2 segments of
// seg_len elements (the second one shorter where K is odd in words): A row s * 8 + u is
// segment s of output row u (8 output rows per block), and B column s * M + t is token
// t's segment s (M <= 4). Only products of matching segments are read (summed over s):
// the others fill columns of the instruction that a decode step leaves empty anyway.
// Cutting K gives the grid twice the blocks of a 16-row tile with no reduction across
// blocks (Gemma-7B: 384 blocks, all resident at once on 132 SMs).
constexpr int kSplit = 2;
constexpr int kSegRows = 16 / kSplit;  // A rows per segment = output rows per block
constexpr int kMaxM = 8 / kSplit;      // tokens that fit B's 8 columns
static_assert(GEGLU_DECODE_LINEAR_MAX_M == kMaxM, "each token's segments take B columns");

struct Params {
  const void* x;
  const void* w;
  const void* bias;      // [rows] or null
  const void* residual;  // [M, rows] (row stride ldr) added in the epilogue, or null
  void* out;
  int64_t ldx, ldw, ldo, ldr;
  int K, seg_len;        // seg_len: each row segment's length
  int M, rows;           // tokens; output columns (N)
};

// Segment s's length along K (seg_len: a multiple of 8, so every segment starts 16-byte
// aligned).
__device__ __forceinline__ int seg_len(const Params& p, int s) { return max(0, min(p.seg_len, p.K - s * p.seg_len)); }

// The weight stream and the math: the block's 16 row segments through the ring into the
// mma. Returns the warps' float32 sums over the whole K (warp_sums[warp][0..3][lane] =
// C[g][2q], C[g][2q + 1], C[8 + g][2q], C[8 + g][2q + 1]), visible to the whole block.
template <class T>
__device__ __forceinline__ const float (*stream_rows(const Params& p, int64_t row0))[4][32] {
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
  // projection: 55.3 us unstaggered, 46.4 staggered).
  const int first = int(blockIdx.x % unsigned(chunks));
  auto chunk_k = [&](int c) { return (c + first < chunks ? c + first : c + first - chunks) * kChunk; };
  // Warp 0 fills the stages, lane i < 16 copying A row i: its source row segment (null
  // past `rows`; the math zeroes what rows and segments not copied would hold). Sixteen
  // lanes each issue one copy, where one thread issuing all 16 per stage put its
  // address arithmetic between the stage's release and its refill every time (Gemma-7B
  // down projection: 55.5 us through one thread's loop, 40.2 with sixteen lanes).
  const T* src = nullptr;
  int src_len = 0;
  if (warp == 0 && lane < 16 && row0 + lane % kSegRows < p.rows) {
    src = static_cast<const T*>(p.w) + (row0 + lane % kSegRows) * p.ldw + int64_t(lane / kSegRows) * p.seg_len;
    src_len = seg_len(p, lane / kSegRows);
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
  static_assert(kSegRows >= 8, "A rows 0-7 lie in segment 0");
  const int len_a0 = seg_len(p, 0), len_a1 = seg_len(p, 8 / kSegRows);
  // B column g: token g % M's segment g / M.
  const int b_seg = g / p.M;
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
  uint4 b_next[2];
  load_tokens(0, b_next);
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int c = 0; c < chunks; ++c) {
    const uint4 b[2] = {b_next[0], b_next[1]};
    if (c + 1 < chunks) load_tokens(c + 1, b_next);
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

// Four blocks per SM (60 registers): capped at five, the spilled registers cost more
// than the extra block gained (Gemma-7B 42.2 us against 40.2), so where the grid needs
// more than one wave of blocks the op keeps cuBLAS (geglu_decode_sm90_linear_max_n).
// Thread i < 8 * kMaxM finishes output row row0 + i / kMaxM for token i % kMaxM.
template <class T>
__global__ void __launch_bounds__(kThreads, 4) decode_linear(const Params p) {
  using geglu_cuda::to_float;
  const int64_t row0 = int64_t(blockIdx.x) * kSegRows;
  const auto warp_sums = stream_rows<T>(p, row0);
  if (threadIdx.x >= kSegRows * kMaxM) return;
  const int token = threadIdx.x % kMaxM, r = threadIdx.x / kMaxM;
  const int64_t col = row0 + r;
  if (token >= p.M || col >= p.rows) return;
  float y = 0.0f;
#pragma unroll
  for (int s = 0; s < kSplit; ++s) y += block_sum(warp_sums, s * kSegRows + r, s * p.M + token);
  if (p.bias) y += to_float(static_cast<const T*>(p.bias)[col]);
  if (p.residual) y += to_float(static_cast<const T*>(p.residual)[token * p.ldr + col]);
  static_cast<T*>(p.out)[token * p.ldo + col] = geglu_cuda::from_float<T>(y);
}

using Kernel = void (*)(Params);

bool aligned(const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// K cut into `split` segments of whole 16-byte words (K is a multiple of 8).
int segment_length(int64_t K, int split) { return int(((K + split - 1) / split + 7) / 8 * 8); }

int launch(Kernel kernel, Params p, void* stream) {
  int device = 0;
  if (sm90_launcher::current_sm90_device(&device) == nullptr) return GEGLU_SM90_ERR_DEVICE;
  if (p.M == 0) return GEGLU_SM90_OK;
  void* args[] = {&p};
  const unsigned blocks = unsigned((p.rows + kSegRows - 1) / kSegRows);  // < 2^29
  const cudaError_t e = cudaLaunchKernel(reinterpret_cast<const void*>(kernel), dim3(blocks), dim3(kThreads), args,
                                         kRingBytes, static_cast<cudaStream_t>(stream));
  if (e != cudaSuccess) {
    sm90_launcher::record_cuda_error(e);
    return GEGLU_SM90_ERR_CUDA;
  }
  return GEGLU_SM90_OK;
}

}  // namespace geglu_decode

extern "C" int geglu_decode_sm90_linear(const void* x, int64_t M, int64_t K, int64_t ldx, const void* w,
                                        int64_t ldw, const void* bias, const void* residual, int64_t ldr,
                                        void* out, int64_t N, int64_t ldo, int dtype, void* stream) {
  using namespace geglu_decode;
  if (dtype != GEGLU_SM90_BF16 && dtype != GEGLU_SM90_FP16) return GEGLU_SM90_ERR_DTYPE;
  constexpr int64_t kMax = (int64_t(1) << 31) - 1;
  if (M < 0 || M > GEGLU_DECODE_LINEAR_MAX_M || K < 1 || N < 1 || K > kMax || N > kMax || ldx < K || ldw < K ||
      ldo < N || (residual != nullptr && ldr < N)) {
    return GEGLU_SM90_ERR_SHAPE;
  }
  if (K % 8 != 0 || ldx % 8 != 0 || ldw % 8 != 0) return GEGLU_SM90_ERR_STRIDE;
  if (!aligned(x, 16) || !aligned(w, 16) || out == nullptr || !aligned(out, 2) || !aligned(bias, 2) ||
      !aligned(residual, 2)) {
    return GEGLU_SM90_ERR_ALIGN;
  }
  const Kernel kernel = dtype == GEGLU_SM90_BF16 ? decode_linear<__nv_bfloat16> : decode_linear<__half>;
  Params p = {};
  p.x = x;
  p.w = w;
  p.bias = bias;
  p.residual = residual;
  p.out = out;
  p.ldx = ldx, p.ldw = ldw, p.ldo = ldo, p.ldr = ldr;
  p.K = int(K), p.seg_len = segment_length(K, kSplit);
  p.M = int(M), p.rows = int(N);
  return launch(kernel, p, stream);
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
    max_n = int64_t(per_sm) * info->sm_count * kSegRows;
    known[device].store(max_n, std::memory_order_relaxed);
  }
  return max_n;
}
