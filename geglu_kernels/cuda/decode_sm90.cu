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
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
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
// seg_len elements (the last one shorter); kGroups weight matrices are read side by side
// (gate/up: w_gate and w_up; the linear: one). A row s * (16 / kSplit) + g * U + u is
// segment s of unit u's row in matrix g (U = 16 / (kSplit * kGroups) units per step),
// and B column s * M + t is token t's segment s (M <= 8 / kSplit). Only the products
// of matching segments are read (summed over s); the others are wasted columns of an
// instruction whose 8 columns a decode step never fills.
// - gate/up at 1-4 tokens: kSplit = 2, 4 hidden units (4 gate and 4 up rows) per step;
//   at 5-8 tokens kSplit = 1, 8 units.
// - linear (the down projection): kSplit = 2, 8 output rows per step.
// Cutting K shortens each unit's stream, so the units divide evenly among the blocks.
template <int kSplit, int kGroups>
struct Layout {
  static constexpr int kSegRows = 16 / kSplit;        // A rows per segment
  static constexpr int kUnits = kSegRows / kGroups;   // output units per step
  static constexpr int kMaxM = 8 / kSplit;            // tokens that fit B's 8 columns
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
  int K, seg_len;       // seg_len: a multiple of 8, so every segment starts 16-byte aligned
  int M, rows;          // tokens; output columns (H or N)
};

__device__ __forceinline__ int seg_len(const Params& p, int s) { return max(0, min(p.seg_len, p.K - s * p.seg_len)); }

// A position in a block's stream of (unit, chunk) steps. Each unit starts at its own
// chunk and wraps around: blocks that run at once then read addresses spread over the
// rows rather than the same column of every row, which the DRAM serves at a fraction of
// its rate (Gemma-7B down projection: 55.3 us unstaggered, 46.4 staggered; Gemma-2-2B
// gate/up 28.7 and 25.9). Units, steps and chunks fit in 32 bits: rows < 2^31, and a
// block's steps are at most its rows times K / 512.
struct Cursor {
  int unit, c, first;  // first: unit % chunks
  __device__ Cursor(int u, int chunks) : unit(u), c(0), first(u % chunks) {}
  __device__ int k(int chunks) const { return (c + first < chunks ? c + first : c + first - chunks) * kChunk; }
  __device__ void next(int chunks) {
    if (++c == chunks) {
      c = 0;
      ++unit;
      first = first + 1 == chunks ? 0 : first + 1;
    }
  }
};

// The weight stream and the math both kernels share: this block's units (an even share
// of all of them) stream through the ring into the mma, one (unit, chunk) step at a
// time; after each unit's last chunk the 8 warps' sums land in warp_sums and
// epilogue(unit) runs (all threads call it, after a __syncthreads()).
template <class T, int kSplit, int kGroups, class Epilogue>
__device__ __forceinline__ void stream_units(const Params& p, unsigned char* ring, uint64_t* full,
                                             float (*warp_sums)[4][32], Epilogue epilogue) {
  using L = Layout<kSplit, kGroups>;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, q = lane % 4;
  const int units = (p.rows + L::kUnits - 1) / L::kUnits;
  const int u_begin = int(int64_t(units) * blockIdx.x / gridDim.x);
  const int u_end = int(int64_t(units) * (blockIdx.x + 1) / gridDim.x);
  const int chunks = (p.seg_len + kChunk - 1) / kChunk;
  const int steps = (u_end - u_begin) * chunks;
  if (threadIdx.x == 0) {
    for (int i = 0; i < kStages; ++i) mbar_init(&full[i], 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  // Warp 0 fills the stages, lane i < 16 copying A row i's segment of each unit: sixteen
  // lanes each issue one copy, where one thread issuing all 16 per stage put its address
  // arithmetic between the stage's release and its refill every time (Gemma-7B down
  // projection 51.4 us against 40.2).
  const int my_len = lane < 16 ? seg_len(p, L::seg(lane)) : 0;
  const T* my_w = static_cast<const T*>(L::group(lane % 16) == 1 ? p.w[1] : p.w[0]) +
                  int64_t(L::seg(lane % 16)) * p.seg_len + int64_t(L::unit(lane % 16)) * p.ldw;
  const int64_t unit_stride = int64_t(L::kUnits) * p.ldw;
  const int rows_left = p.rows - L::unit(lane % 16);  // this lane's row of unit u exists if u * U < rows_left
  Cursor fill(u_begin, chunks);
  int filled = 0;
  // Each copying lane adds its bytes to the stage's expected count before its copy;
  // lane 0 arrives once all have.
  auto issue = [&]() {
    const int k0 = fill.k(chunks);
    uint64_t* bar = &full[filled % kStages];
    const int elems = min(kChunk, my_len - k0);
    if (elems > 0 && fill.unit * L::kUnits < rows_left) {
      const uint32_t bytes = uint32_t(elems) * sizeof(T);
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // the warps' reads before the async writes
      mbar_expect_tx(bar, bytes);
      bulk_copy(ring + (filled % kStages) * kStageBytes + lane * kRowPitch, my_w + fill.unit * unit_stride + k0,
                bytes, bar);
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(bar);
    fill.next(chunks);
    ++filled;
  };
  if (warp == 0) {
    while (filled < kStages && filled < steps) issue();
  }
  // This lane's A rows g and 8 + g hold K up to len_a0 / len_a1 of their segments; its B
  // column g is token g % M's segment g / M.
  const int len_a0 = seg_len(p, 0), len_a1 = seg_len(p, L::seg(8));  // rows 0-7 are all in segment 0
  const int b_seg = g / p.M;
  const bool has_token = b_seg < kSplit;
  const int x_len = has_token ? seg_len(p, b_seg) : 0;
  const T* x = static_cast<const T*>(p.x) + (has_token ? g % p.M : 0) * p.ldx + int64_t(has_token ? b_seg : 0) * p.seg_len;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  const int e0 = warp * 64;  // this warp's 64 elements of each chunk
  auto load_tokens = [&](int k0, uint4(&b)[2]) {
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const int k = k0 + e0 + 8 * q + 32 * s;
      b[s] = k < x_len ? __ldg(reinterpret_cast<const uint4*>(x + k)) : zero;
    }
  };
  // The linear's tokens are loaded one step ahead of their use: its token rows (48 KB
  // at Gemma-7B) miss L1, and the miss then overlaps the wait for the weights instead of
  // following it (46.4 us loading after the wait, 40.3 ahead). The gate/up's few KB stay
  // in L1, where the 8 registers the prefetch holds cost more than they save.
  constexpr bool kPrefetchTokens = kGroups == 1;
  Cursor use(u_begin, chunks);
  uint4 b_next[2];
  if (kPrefetchTokens && steps > 0) load_tokens(use.k(chunks), b_next);
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int step = 0; step < steps; ++step) {
    const int k0 = use.k(chunks);
    const bool unit_done = use.c == chunks - 1;
    const int unit = use.unit;
    use.next(chunks);
    uint4 b[2];
    if (kPrefetchTokens) {
      b[0] = b_next[0], b[1] = b_next[1];
      if (step + 1 < steps) load_tokens(use.k(chunks), b_next);
    }
    mbar_wait(&full[step % kStages], (step / kStages) & 1);
    if (!kPrefetchTokens) load_tokens(k0, b);
    const unsigned char* stage = ring + (step % kStages) * kStageBytes;
    uint4 a[2][2];  // [A rows g, 8 + g][word]
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const int e = e0 + 8 * q + 32 * s, k = k0 + e;
      // Lengths are multiples of 8: a 16-byte word is all in or all out.
      a[0][s] = k < len_a0 ? *reinterpret_cast<const uint4*>(stage + g * kRowPitch + e * 2) : zero;
      a[1][s] = k < len_a1 ? *reinterpret_cast<const uint4*>(stage + (g + 8) * kRowPitch + e * 2) : zero;
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int s = i / 2, w = (i % 2) * 2;
      mma_m16n8k16<T>(acc, word(a[0][s], w), word(a[1][s], w), word(a[0][s], w + 1), word(a[1][s], w + 1),
                      word(b[s], w), word(b[s], w + 1));
    }
    if (unit_done) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        warp_sums[warp][r][lane] = acc[r];
        acc[r] = 0.0f;
      }
    }
    __syncthreads();  // every warp is done with the stage (and, at a unit's end, has its sums in)
    if (warp == 0 && filled < steps) issue();
    if (unit_done) {
      epilogue(unit);
      __syncthreads();  // the sums are read before the next unit's overwrite them
    }
  }
}

// warp_sums' sum over the warps of C[row][col] (row < 16, col < 8).
__device__ __forceinline__ float block_sum(const float (*warp_sums)[4][32], int row, int col) {
  const int reg = (row >= 8 ? 2 : 0) + col % 2, lane = 4 * (row % 8) + col / 2;
  float sum = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) sum += warp_sums[w][reg][lane];
  return sum;
}

// Unit u's output for (unit row r, token t) of matrix `group`: the segments' sums.
template <int kSplit, int kGroups>
__device__ __forceinline__ float unit_sum(const float (*warp_sums)[4][32], int group, int r, int t, int M) {
  using L = Layout<kSplit, kGroups>;
  float sum = 0.0f;
#pragma unroll
  for (int s = 0; s < kSplit; ++s) sum += block_sum(warp_sums, L::a_row(s, group, r), s * M + t);
  return sum;
}

#ifndef GATE_UP_MIN_BLOCKS
#define GATE_UP_MIN_BLOCKS 6
#endif
// Six blocks per SM, the most the ring's shared memory allows.
template <class T, bool kTanh, int kSplit>
__global__ void __launch_bounds__(kThreads, GATE_UP_MIN_BLOCKS) decode_gate_up(const Params p) {
  using geglu_cuda::to_float;
  using L = Layout<kSplit, 2>;
  extern __shared__ __align__(128) unsigned char ring[];
  __shared__ __align__(8) uint64_t full[kStages];
  __shared__ float warp_sums[kWarps][4][32];
  stream_units<T, kSplit, 2>(p, ring, full, warp_sums, [&](int unit) {
    // Threads 0..U*kMaxM-1 finish one (hidden unit, token) output each.
    if (threadIdx.x >= L::kUnits * L::kMaxM) return;
    const int token = threadIdx.x % L::kMaxM, r = threadIdx.x / L::kMaxM;
    const int col = unit * L::kUnits + r;
    if (token >= p.M || col >= p.rows) return;
    float gate = unit_sum<kSplit, 2>(warp_sums, 0, r, token, p.M);
    float up = unit_sum<kSplit, 2>(warp_sums, 1, r, token, p.M);
    if (p.bias[0]) gate += to_float(static_cast<const T*>(p.bias[0])[col]);
    if (p.bias[1]) up += to_float(static_cast<const T*>(p.bias[1])[col]);
    static_cast<T*>(p.out)[token * p.ldo + col] = geglu_cuda::from_float<T>(geglu_cuda::gelu<kTanh>(gate) * up);
  });
}

constexpr int kLinearSplit = 2;

// Four blocks per SM (62 registers): capped at five, the spilled registers cost more
// than the extra block gained (Gemma-7B 42.2 us against 40.2).
template <class T>
__global__ void __launch_bounds__(kThreads, 4) decode_linear(const Params p) {
  using geglu_cuda::to_float;
  using L = Layout<kLinearSplit, 1>;
  extern __shared__ __align__(128) unsigned char ring[];
  __shared__ __align__(8) uint64_t full[kStages];
  __shared__ float warp_sums[kWarps][4][32];
  stream_units<T, kLinearSplit, 1>(p, ring, full, warp_sums, [&](int unit) {
    // Threads 0..U*kMaxM-1 finish one (row, token) output each.
    if (threadIdx.x >= L::kUnits * L::kMaxM) return;
    const int token = threadIdx.x % L::kMaxM, r = threadIdx.x / L::kMaxM;
    const int col = unit * L::kUnits + r;
    if (token >= p.M || col >= p.rows) return;
    float y = unit_sum<kLinearSplit, 1>(warp_sums, 0, r, token, p.M);
    if (p.bias[0]) y += to_float(static_cast<const T*>(p.bias[0])[col]);
    if (p.residual) y += to_float(static_cast<const T*>(p.residual)[token * p.ldr + col]);
    static_cast<T*>(p.out)[token * p.ldo + col] = geglu_cuda::from_float<T>(y);
  });
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

// The blocks of `kernel` resident at once on the device (occupancy x SMs), asked once
// per kernel and device: the grid, each block taking an even share of the units.
constexpr int kKernels = 10;
int resident_blocks(Kernel kernel, int index, int device, int sm_count) {
  static std::atomic<int> known[kKernels][sm90_launcher::kMaxDevices];  // 0: not asked yet
  int blocks = known[index][device].load(std::memory_order_relaxed);
  if (blocks == 0) {
    int per_sm = 0;
    const cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, kRingBytes);
    if (e != cudaSuccess) {
      sm90_launcher::record_cuda_error(e);
      return 0;
    }
    blocks = per_sm * sm_count;
    known[index][device].store(blocks, std::memory_order_relaxed);
  }
  return blocks;
}

// K cut into `split` segments of whole 16-byte words (K is a multiple of 8).
int segment_length(int64_t K, int split) { return int(((K + split - 1) / split + 7) / 8 * 8); }

int launch(Kernel kernel, int index, int units_per_step, const Params& p, void* stream) {
  int device = 0;
  const sm90_launcher::DeviceInfo* info = sm90_launcher::current_sm90_device(&device);
  if (info == nullptr) return GEGLU_SM90_ERR_DEVICE;
  if (p.M == 0) return GEGLU_SM90_OK;
  const int resident = resident_blocks(kernel, index, device, info->sm_count);
  if (resident == 0) return GEGLU_SM90_ERR_CUDA;
  const int64_t units = (int64_t(p.rows) + units_per_step - 1) / units_per_step;
  Params args = p;
  void* argv[] = {&args};
  const unsigned blocks = unsigned(units < resident ? units : resident);
  const cudaError_t e = cudaLaunchKernel(reinterpret_cast<const void*>(kernel), dim3(blocks), dim3(kThreads), argv,
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
  // K cut in two up to 4 tokens (2 x 4 of B's 8 columns), whole above.
  const bool split = M <= Layout<2, 2>::kMaxM;
  const int index = (dtype == GEGLU_SM90_BF16 ? 0 : 4) + (approximate != 0 ? 2 : 0) + (split ? 1 : 0);
  const Kernel kernels[8] = {decode_gate_up<__nv_bfloat16, false, 1>, decode_gate_up<__nv_bfloat16, false, 2>,
                             decode_gate_up<__nv_bfloat16, true, 1>,  decode_gate_up<__nv_bfloat16, true, 2>,
                             decode_gate_up<__half, false, 1>,        decode_gate_up<__half, false, 2>,
                             decode_gate_up<__half, true, 1>,         decode_gate_up<__half, true, 2>};
  Params p = {};
  p.x = x;
  p.w[0] = w_gate;
  p.w[1] = w_up;
  p.bias[0] = b_gate;
  p.bias[1] = b_up;
  p.out = out;
  p.ldx = ldx, p.ldw = ldw, p.ldo = ldo;
  p.K = int(K), p.seg_len = segment_length(K, split ? 2 : 1);
  p.M = int(M), p.rows = int(H);
  return launch(kernels[index], index, split ? Layout<2, 2>::kUnits : Layout<1, 2>::kUnits, p, stream);
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
  const bool bf16 = dtype == GEGLU_SM90_BF16;
  Params p = {};
  p.x = x;
  p.w[0] = w;
  p.bias[0] = bias;
  p.residual = residual;
  p.out = out;
  p.ldx = ldx, p.ldw = ldw, p.ldo = ldo, p.ldr = ldr;
  p.K = int(K), p.seg_len = segment_length(K, kLinearSplit);
  p.M = int(M), p.rows = int(N);
  return launch(bf16 ? decode_linear<__nv_bfloat16> : decode_linear<__half>, bf16 ? 8 : 9,
                Layout<kLinearSplit, 1>::kUnits, p, stream);
}
