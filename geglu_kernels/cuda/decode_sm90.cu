// The GeGLU gate/up GEMM for decode (1..8 tokens) on Hopper: the kernel and its C
// launcher (decode_sm90.h).
//
// At a few tokens the gate/up GEMM is a weight read (Gemma-7B: 302 MB of weights for
// 0.15 GFLOP per token), so the kernel is a weight stream with the math on the side:
// - Rows: a block owns 8 hidden units, 16 weight rows: their 8 gate rows and their 8 up
//   rows. Its thread 0 streams them in 512-element chunks, one-dimensional bulk copies
//   (cp.async.bulk, the TMA engine without a tensor map) of each row's 1 KB chunk into a
//   2-stage shared-memory ring, each stage completing on an mbarrier. Whole 1 KB row
//   segments per request read at a steady rate whatever ran before; a variant that
//   loaded 16-byte pieces straight into registers (git 509f929) ran 74.6 us at Gemma-7B
//   after the GEMM engine and 93.7 us after cuBLAS's down GEMM, reading 10-23% more DRAM
//   bytes than the weights (benchmarks/results/h200/decode/). Two stages, not three or
//   four: the ring's shared memory comes out of L1, where the token rows (re-read by
//   every block) must stay; with three, Gemma-7B at 8 tokens took 85.0 us against 77.9.
// - Math: swap-AB mma.sync m16n8k16, the 16 rows as the A operand (gate rows 0-7, up rows
//   8-15, so each lane ends with matching gate and up sums) and up to 8 tokens as the B
//   operand's columns. K is permuted per lane: a dot product may sum its K in any order
//   as long as both operands use the same one, so lane (g, q) = (lane / 4, lane % 4)
//   reads elements 8q..8q+7 and 32+8q..32+8q+7 of a 64-element piece as 16-byte words
//   and feeds element 4s..4s+3 to the fragment slots of k = 2q, 2q+1, 2q+8, 2q+9 of k16
//   step s. The tokens are read from global memory (L1) with the same permutation.
//   Rows are 16 bytes longer than a chunk in shared memory, so a warp's fragment reads
//   hit every bank equally (4 wavefronts per 512 bytes, the minimum).
// - The 8 warps split each chunk (64 elements each) and add their sums in shared memory
//   at the end; the epilogue (biases, GELU, product) runs in float32 with one rounding.
//
// Measured against the engine's small-M schedule and cuBLAS: docs/DESIGN.md, "The decode
// gate/up kernel". Build: part of the geglu_gemm_sm90 kernel (build.toml), sm_90a.

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
constexpr int kHiddenPerBlock = 8;
constexpr int kChunk = 512;                  // K elements of each of the 16 rows per stage
constexpr int kStages = 2;
constexpr int kRowPitch = kChunk * 2 + 16;   // bytes: the 16-byte skew spreads the banks
constexpr int kStageBytes = 16 * kRowPitch;
constexpr int kRingBytes = kStages * kStageBytes;  // 33,280
static_assert(kChunk == kWarps * 64, "each warp takes one 64-element piece of a chunk");

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
__global__ void __launch_bounds__(kThreads) decode_gate_up(const Params p) {
  using geglu_cuda::to_float;
  extern __shared__ __align__(128) unsigned char ring[];
  __shared__ __align__(8) uint64_t full[kStages];
  __shared__ float warp_sums[kWarps][4][32];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, q = lane % 4;
  const int64_t unit0 = int64_t(blockIdx.x) * kHiddenPerBlock;
  const int chunks = (p.K + kChunk - 1) / kChunk;
  if (threadIdx.x == 0) {
    for (int i = 0; i < kStages; ++i) mbar_init(&full[i], 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  // Thread 0: chunk c of the 16 rows (gate rows, then up rows) into its stage. Rows past
  // H are not copied; their stale accumulators reach no output.
  auto issue = [&](int c) {
    const int k0 = c * kChunk;
    const uint32_t bytes = uint32_t(min(kChunk, p.K - k0)) * sizeof(T);
    const int units = int(p.H - unit0 < kHiddenPerBlock ? p.H - unit0 : kHiddenPerBlock);
    unsigned char* stage = ring + (c % kStages) * kStageBytes;
    uint64_t* bar = &full[c % kStages];
    mbar_expect_tx(bar, 2 * units * bytes);
    for (int r = 0; r < units; ++r) {
      const int64_t at = (unit0 + r) * p.ldw + k0;
      bulk_copy(stage + r * kRowPitch, static_cast<const T*>(p.w_gate) + at, bytes, bar);
      bulk_copy(stage + (r + 8) * kRowPitch, static_cast<const T*>(p.w_up) + at, bytes, bar);
    }
  };
  if (threadIdx.x == 0) {
    for (int c = 0; c < kStages && c < chunks; ++c) issue(c);
  }
  const T* x = static_cast<const T*>(p.x) + (g < p.M ? g : 0) * p.ldx;  // token g's row
  const uint4 zero = make_uint4(0, 0, 0, 0);
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int c = 0; c < chunks; ++c) {
    mbar_wait(&full[c % kStages], (c / kStages) & 1);
    const unsigned char* stage = ring + (c % kStages) * kStageBytes;
    const int e0 = warp * 64;  // this warp's 64 elements of the chunk
    uint4 a[2][2], b[2];       // [gate, up][word], [word]
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const int e = e0 + 8 * q + 32 * s, k = c * kChunk + e;
      const bool in_k = k < p.K;  // K is a multiple of 8: words are all in or all out
      a[0][s] = in_k ? *reinterpret_cast<const uint4*>(stage + g * kRowPitch + e * 2) : zero;
      a[1][s] = in_k ? *reinterpret_cast<const uint4*>(stage + (g + 8) * kRowPitch + e * 2) : zero;
      b[s] = g < p.M && in_k ? __ldg(reinterpret_cast<const uint4*>(x + k)) : zero;
    }
#pragma unroll
    for (int step = 0; step < 4; ++step) {
      const int s = step / 2, w = (step % 2) * 2;
      mma_m16n8k16<T>(acc, word(a[0][s], w), word(a[1][s], w), word(a[0][s], w + 1), word(a[1][s], w + 1),
                      word(b[s], w), word(b[s], w + 1));
    }
    __syncthreads();  // every warp is done with the stage
    if (threadIdx.x == 0 && c + kStages < chunks) {
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // generic reads before the async writes
      issue(c + kStages);
    }
  }

#pragma unroll
  for (int r = 0; r < 4; ++r) warp_sums[warp][r][lane] = acc[r];
  __syncthreads();
  // Accumulator r of lane l: unit unit0 + l / 4, token 2 (l % 4) + r % 2, gate for r < 2
  // and up for r >= 2. Threads 0-63 finish one (unit, token) output each.
  if (threadIdx.x >= 64) return;
  const int j = threadIdx.x / 32, l = threadIdx.x % 32;
  const int token = 2 * (l % 4) + j;
  const int64_t col = unit0 + l / 4;
  if (token >= p.M || col >= p.H) return;
  float gate = 0.0f, up = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    gate += warp_sums[w][j][l];
    up += warp_sums[w][j + 2][l];
  }
  if (p.b_gate) gate += to_float(static_cast<const T*>(p.b_gate)[col]);
  if (p.b_up) up += to_float(static_cast<const T*>(p.b_up)[col]);
  static_cast<T*>(p.out)[token * p.ldo + col] = geglu_cuda::from_float<T>(geglu_cuda::gelu<kTanh>(gate) * up);
}

using Kernel = void (*)(Params);

// The ring needs more than the default 48 KB of dynamic shared memory: raised once per
// kernel and device (false if CUDA refused).
bool allow_ring(Kernel kernel, int index, int device) {
  static std::atomic<bool> done[4][sm90_launcher::kMaxDevices];
  std::atomic<bool>& flag = done[index][device];
  if (flag.load(std::memory_order_acquire)) return true;
  const cudaError_t e = cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, kRingBytes);
  if (e != cudaSuccess) {
    sm90_launcher::record_cuda_error(e);
    return false;
  }
  flag.store(true, std::memory_order_release);
  return true;
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

  const bool tanh = approximate != 0;
  const int index = (dtype == GEGLU_SM90_BF16 ? 0 : 2) + (tanh ? 1 : 0);
  const Kernel kernels[4] = {decode_gate_up<__nv_bfloat16, false>, decode_gate_up<__nv_bfloat16, true>,
                             decode_gate_up<__half, false>, decode_gate_up<__half, true>};
  if (!allow_ring(kernels[index], index, device)) return GEGLU_SM90_ERR_CUDA;
  Params p{x, w_gate, w_up, b_gate, b_up, out, ldx, ldw, ldo, int(M), int(K), int(H)};
  void* args[] = {&p};
  const int64_t blocks = (H + kHiddenPerBlock - 1) / kHiddenPerBlock;  // < 2^28
  const cudaError_t e = cudaLaunchKernel(reinterpret_cast<const void*>(kernels[index]), dim3(unsigned(blocks)),
                                         dim3(kThreads), args, kRingBytes, static_cast<cudaStream_t>(stream));
  if (e != cudaSuccess) {
    sm90_launcher::record_cuda_error(e);
    return GEGLU_SM90_ERR_CUDA;
  }
  return GEGLU_SM90_OK;
}
