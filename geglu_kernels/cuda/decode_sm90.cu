// The GeGLU gate/up GEMM for decode (1..8 tokens) on Hopper: the kernel and its C
// launcher (decode_sm90.h).
//
// At a few tokens the gate/up GEMM is a weight read (Gemma-7B: 302 MB of weights for
// 0.15 GFLOP per token), so the kernel is built around the weight stream, with no
// shared-memory staging:
// - Swap-AB on mma.sync m16n8k16: the weight rows are the A operand's 16 rows, the tokens
//   the B operand's 8 columns. A block owns 8 hidden units: their 8 gate rows are A rows
//   0-7 and their 8 up rows A rows 8-15, so each lane ends with matching gate and up sums
//   in its accumulators and the GeGLU is applied where they are.
// - Loads straight into the mma fragments: K is permuted per lane. A dot product may sum
//   its K in any order as long as both operands use the same one, so lane (g, q) =
//   (lane / 4, lane % 4) loads two 16-byte segments of each of its two rows per 64-element
//   chunk, at elements 8q and 32 + 8q (each load instruction of a quad then covers whole
//   32-byte sectors: splitting a sector over two instructions made the L2 serve every
//   sector twice, benchmarks/results/h200/decode/ncu_*_split_sectors.txt), and feeds
//   element 4s..4s+3 of them to the fragment slots that stand for k = 2q, 2q+1, 2q+8,
//   2q+9 of k16 step s. The token operand is loaded with the same permutation.
// - Weights bypass L1 (ld.global.nc.L1::no_allocate): they are read once, and the tokens
//   (M x K, reread by every block) stay in L1.
// - The block's 8 warps split its K range (interleaved chunks, so the block reads each
//   row front to back, two chunks per warp in flight) and add their sums in shared
//   memory; the epilogue (biases, GELU, product) runs in float32 with one rounding.
//
// Measured against the engine's small-M schedule and cuBLAS (decode_sm90 section of
// docs/DESIGN.md). Build: part of the geglu_gemm_sm90 kernel (build.toml), sm_90a.

#include "decode_sm90.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "gelu_math.cuh"
#include "sm90_launcher.cuh"

namespace geglu_decode {

constexpr int kWarps = 8;  // per block, splitting its K range
constexpr int kThreads = kWarps * 32;
#ifndef DECODE_SEGMENTS
#define DECODE_SEGMENTS 4
#endif
#ifndef DECODE_UNROLL
#define DECODE_UNROLL 1
#endif
constexpr int kSegments = DECODE_SEGMENTS;  // 16-byte loads per lane and row in a chunk
constexpr int kChunk = 32 * kSegments;      // K elements of a row a quad loads per step
constexpr int kStride = kWarps * kChunk;    // between a warp's consecutive chunks
constexpr int kUnroll = DECODE_UNROLL;      // chunks per row a warp loads at once
constexpr int kHiddenPerBlock = 8;

struct Params {
  const void* x;
  const void* w_gate;
  const void* w_up;
  const void* b_gate;
  const void* b_up;
  void* out;
  int64_t ldx, ldw, ldo;
  int M, K, H;
};

template <class T> struct Storage;
template <> struct Storage<__nv_bfloat16> {
  static __device__ __forceinline__ void mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                             uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __device__ __forceinline__ __nv_bfloat16 from_float(float v) { return __float2bfloat16_rn(v); }
};
template <> struct Storage<__half> {
  static __device__ __forceinline__ void mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                             uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
  static __device__ __forceinline__ __half from_float(float v) { return __float2half_rn(v); }
};

// A weight segment: read once, so not kept in L1; the L2 fetches whole 256-byte sector
// groups (a quad's 128-byte row line and the next warp's).
__device__ __forceinline__ uint4 load_weight(const void* p) {
  uint4 v;
#ifndef DECODE_LOAD
#define DECODE_LOAD "ld.global.nc.L1::no_allocate.L2::256B.v4.u32"
#endif
  asm(DECODE_LOAD " {%0,%1,%2,%3}, [%4];\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

template <class T, bool kTanh>
__global__ void __launch_bounds__(kThreads) decode_gate_up(const Params p) {
  using S = Storage<T>;
  __shared__ float warp_sums[kWarps][4][32];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, q = lane % 4;
  // This lane's A rows: gate row (mma row g) and up row (mma row g + 8) of one unit.
  const int64_t unit = int64_t(blockIdx.x) * kHiddenPerBlock + g;
  const bool in_h = unit < p.H;
  const T* wg = static_cast<const T*>(p.w_gate) + (in_h ? unit : 0) * p.ldw;
  const T* wu = static_cast<const T*>(p.w_up) + (in_h ? unit : 0) * p.ldw;
  const T* x = static_cast<const T*>(p.x) + (g < p.M ? g : 0) * p.ldx;  // token g's row
  const uint4 zero = make_uint4(0, 0, 0, 0);

  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  // The loop bound is the warp's (mma.sync needs all 32 lanes); each lane tests its own
  // segments (K is a multiple of 8).
  for (int c0 = warp * kChunk; c0 < p.K; c0 += kUnroll * kStride) {
    uint4 a[kUnroll][2][kSegments];  // [chunk][gate, up][segment]
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int s = 0; s < kSegments; ++s) {
        const int k = c0 + u * kStride + 8 * q + 32 * s;
        a[u][0][s] = in_h && k < p.K ? load_weight(wg + k) : zero;
        a[u][1][s] = in_h && k < p.K ? load_weight(wu + k) : zero;
      }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      uint4 b[kSegments];
#pragma unroll
      for (int s = 0; s < kSegments; ++s) {
        const int k = c0 + u * kStride + 8 * q + 32 * s;
        b[s] = g < p.M && k < p.K ? __ldg(reinterpret_cast<const uint4*>(x + k)) : zero;
      }
#pragma unroll
      for (int step = 0; step < 2 * kSegments; ++step) {
        const int s = step / 2, w = (step % 2) * 2;
        S::mma(acc, word(a[u][0][s], w), word(a[u][1][s], w), word(a[u][0][s], w + 1), word(a[u][1][s], w + 1),
               word(b[s], w), word(b[s], w + 1));
      }
    }
  }

#pragma unroll
  for (int i = 0; i < 4; ++i) warp_sums[warp][i][lane] = acc[i];
  __syncthreads();
  // Accumulator i of lane l: unit 8 blockIdx.x + l / 4, token 2 (l % 4) + i % 2, gate
  // for i < 2 and up for i >= 2. Threads 0-63 finish one (unit, token) output each.
  if (threadIdx.x >= 64) return;
  const int j = threadIdx.x / 32, l = threadIdx.x % 32;
  const int token = 2 * (l % 4) + j;
  const int64_t col = int64_t(blockIdx.x) * kHiddenPerBlock + l / 4;
  if (token >= p.M || col >= p.H) return;
  float gate = 0.0f, up = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    gate += warp_sums[w][j][l];
    up += warp_sums[w][j + 2][l];
  }
  if (p.b_gate) gate += S::to_float(static_cast<const T*>(p.b_gate)[col]);
  if (p.b_up) up += S::to_float(static_cast<const T*>(p.b_up)[col]);
  static_cast<T*>(p.out)[token * p.ldo + col] = S::from_float(geglu_cuda::gelu<kTanh>(gate) * up);
}


// ---- weight stream through 1-D bulk copies (cp.async.bulk) into a shared-memory ring ----
#ifndef DECODE_BULK_CHUNK
#define DECODE_BULK_CHUNK 512
#endif
#ifndef DECODE_BULK_STAGES
#define DECODE_BULK_STAGES 4
#endif
constexpr int kBulkChunk = DECODE_BULK_CHUNK;  // K elements of each of 16 rows per stage
constexpr int kBulkStages = DECODE_BULK_STAGES;
constexpr int kRowPitch = kBulkChunk * 2 + 16;  // bytes: 16-byte skew keeps the fragment reads conflict-free
constexpr int kStageBytes = 16 * kRowPitch;
constexpr int kBulkSmem = kBulkStages * kStageBytes;
static_assert(kBulkChunk % (kWarps * 64) == 0, "each warp takes whole 64-element pieces of a stage");

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
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

template <class T, bool kTanh>
__global__ void __launch_bounds__(kThreads) decode_gate_up_bulk(const Params p) {
  using S = Storage<T>;
  extern __shared__ __align__(128) unsigned char ring[];
  __shared__ __align__(8) uint64_t full[kBulkStages];
  __shared__ float warp_sums[kWarps][4][32];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, q = lane % 4;
  const int chunks = (p.K + kBulkChunk - 1) / kBulkChunk;
  const int64_t groups = (p.H + kHiddenPerBlock - 1) / kHiddenPerBlock;
  // This block's groups of 8 hidden units: blockIdx.x, + gridDim.x, ...; its steps: every
  // chunk of every group, one stream through the ring.
  const int64_t mine = (groups - blockIdx.x + gridDim.x - 1) / gridDim.x;
  const int64_t steps = mine * chunks;
  if (threadIdx.x == 0) {
    for (int i = 0; i < kBulkStages; ++i) mbar_init(&full[i], 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  // Thread 0: step i's chunk of its group's 16 rows (gate rows, then up rows).
  auto issue = [&](int64_t i) {
    const int64_t unit0 = (blockIdx.x + (i / chunks) * gridDim.x) * kHiddenPerBlock;
    const int k0 = int(i % chunks) * kBulkChunk;
    const uint32_t bytes = uint32_t(min(kBulkChunk, p.K - k0)) * sizeof(T);
    const int units = int(p.H - unit0 < kHiddenPerBlock ? p.H - unit0 : kHiddenPerBlock);
    unsigned char* stage = ring + (i % kBulkStages) * kStageBytes;
    uint64_t* bar = &full[i % kBulkStages];
    mbar_expect_tx(bar, 2 * units * bytes);
    for (int r = 0; r < units; ++r) {
      const int64_t at = (unit0 + r) * p.ldw + k0;
      bulk_copy(stage + r * kRowPitch, static_cast<const T*>(p.w_gate) + at, bytes, bar);
      bulk_copy(stage + (r + 8) * kRowPitch, static_cast<const T*>(p.w_up) + at, bytes, bar);
    }
  };
  if (threadIdx.x == 0) {
    for (int64_t i = 0; i < kBulkStages && i < steps; ++i) issue(i);
  }
  const T* x = static_cast<const T*>(p.x) + (g < p.M ? g : 0) * p.ldx;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t i = 0; i < steps; ++i) {
    const int c = int(i % chunks);
    mbar_wait(&full[i % kBulkStages], int(i / kBulkStages) & 1);
    const unsigned char* stage = ring + (i % kBulkStages) * kStageBytes;
#pragma unroll
    for (int piece = 0; piece < kBulkChunk / (kWarps * 64); ++piece) {
      const int e0 = (piece * kWarps + warp) * 64;  // this warp's 64 elements of the stage
      uint4 a[2][2], b[2];
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        const int e = e0 + 8 * q + 32 * s, k = c * kBulkChunk + e;
        const bool in_k = k < p.K;
        a[0][s] = in_k ? *reinterpret_cast<const uint4*>(stage + g * kRowPitch + e * 2) : zero;
        a[1][s] = in_k ? *reinterpret_cast<const uint4*>(stage + (g + 8) * kRowPitch + e * 2) : zero;
        b[s] = g < p.M && in_k ? __ldg(reinterpret_cast<const uint4*>(x + k)) : zero;
      }
#pragma unroll
      for (int step = 0; step < 4; ++step) {
        const int s = step / 2, w = (step % 2) * 2;
        S::mma(acc, word(a[0][s], w), word(a[1][s], w), word(a[0][s], w + 1), word(a[1][s], w + 1), word(b[s], w),
               word(b[s], w + 1));
      }
    }
    const bool last = c == chunks - 1;  // the group's sums are complete
    if (last) {
#pragma unroll
      for (int r = 0; r < 4; ++r) warp_sums[warp][r][lane] = acc[r];
    }
    __syncthreads();  // the stage is consumed (and the sums written)
    if (threadIdx.x == 0 && i + kBulkStages < steps) {
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      issue(i + kBulkStages);
    }
    if (last) {
      // Accumulator r of lane l: unit 8 group + l / 4, token 2 (l % 4) + r % 2, gate for
      // r < 2 and up for r >= 2. Threads 0-63 finish one (unit, token) output each.
      const int j = threadIdx.x / 32, l = threadIdx.x % 32;
      const int token = 2 * (l % 4) + j;
      const int64_t col = (blockIdx.x + (i / chunks) * gridDim.x) * kHiddenPerBlock + l / 4;
      if (threadIdx.x < 64 && token < p.M && col < p.H) {
        float gate = 0.0f, up = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) {
          gate += warp_sums[w][j][l];
          up += warp_sums[w][j + 2][l];
        }
        if (p.b_gate) gate += S::to_float(static_cast<const T*>(p.b_gate)[col]);
        if (p.b_up) up += S::to_float(static_cast<const T*>(p.b_up)[col]);
        static_cast<T*>(p.out)[token * p.ldo + col] = S::from_float(geglu_cuda::gelu<kTanh>(gate) * up);
      }
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[r] = 0.0f;
      __syncthreads();  // warp_sums is free for the next group
    }
  }
}

bool aligned(const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

}  // namespace geglu_decode

extern "C" int geglu_decode_sm90_gate_up(const void* x, int64_t M, int64_t K, int64_t ldx, const void* w_gate,
                                         const void* w_up, int64_t ldw, const void* b_gate, const void* b_up,
                                         void* out, int64_t H, int64_t ldo, int dtype, int approximate,
                                         void* stream) {
  using namespace geglu_decode;
  if (dtype != GEGLU_SM90_BF16 && dtype != GEGLU_SM90_FP16) return GEGLU_SM90_ERR_DTYPE;
  constexpr int64_t kMax = (int64_t(1) << 31) - 1;
  if (M < 0 || M > GEGLU_DECODE_MAX_M || K < 1 || H < 1 || K > kMax || H > kMax || ldx < K || ldw < K ||
      ldo < H) {
    return GEGLU_SM90_ERR_SHAPE;
  }
  if (K % 8 != 0 || ldx % 8 != 0 || ldw % 8 != 0) return GEGLU_SM90_ERR_STRIDE;
  if (!aligned(x, 16) || !aligned(w_gate, 16) || !aligned(w_up, 16) || out == nullptr || !aligned(out, 2) ||
      !aligned(b_gate, 2) || !aligned(b_up, 2)) {
    return GEGLU_SM90_ERR_ALIGN;
  }
  int device = 0;
  if (sm90_launcher::current_sm90_device(&device) == nullptr) return GEGLU_SM90_ERR_DEVICE;
  if (M == 0) return GEGLU_SM90_OK;

  const Params p{x, w_gate, w_up, b_gate, b_up, out, ldx, ldw, ldo, int(M), int(K), int(H)};
  const bool tanh = approximate != 0;
  void (*kernel)(Params);
#ifdef DECODE_BULK
  if (dtype == GEGLU_SM90_BF16) {
    kernel = tanh ? decode_gate_up_bulk<__nv_bfloat16, true> : decode_gate_up_bulk<__nv_bfloat16, false>;
  } else {
    kernel = tanh ? decode_gate_up_bulk<__half, true> : decode_gate_up_bulk<__half, false>;
  }
  const int smem = kBulkSmem;
  static int resident[4] = {0, 0, 0, 0};
  const int idx = (dtype == GEGLU_SM90_BF16 ? 0 : 2) + (tanh ? 1 : 0);
  if (!resident[idx]) {
    cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    int per_sm = 0, sms = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    resident[idx] = per_sm * sms;
  }
#else
  if (dtype == GEGLU_SM90_BF16) {
    kernel = tanh ? decode_gate_up<__nv_bfloat16, true> : decode_gate_up<__nv_bfloat16, false>;
  } else {
    kernel = tanh ? decode_gate_up<__half, true> : decode_gate_up<__half, false>;
  }
  const int smem = 0;
#endif
#ifdef DECODE_CARVEOUT
  static bool once = [&] {
    cudaFuncSetAttribute(reinterpret_cast<const void*>(decode_gate_up<__nv_bfloat16, true>),
                         cudaFuncAttributePreferredSharedMemoryCarveout, DECODE_CARVEOUT);
    return true;
  }();
  (void)once;
#endif
  int64_t blocks = (H + kHiddenPerBlock - 1) / kHiddenPerBlock;  // < 2^28
#ifdef DECODE_BULK
  if (blocks > resident[idx]) blocks = resident[idx];
#endif
  Params args = p;
  void* arg_ptrs[] = {&args};
  const cudaError_t e = cudaLaunchKernel(reinterpret_cast<const void*>(kernel), dim3(unsigned(blocks)),
                                         dim3(kThreads), arg_ptrs, smem, static_cast<cudaStream_t>(stream));
  if (e != cudaSuccess) {
    sm90_launcher::record_cuda_error(e);
    return GEGLU_SM90_ERR_CUDA;
  }
  return GEGLU_SM90_OK;
}
