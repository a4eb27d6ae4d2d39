// Small-M ("decode") GEMMs at the weight-read floor (issue 15, item 2): for M = 1..64
// tokens, y = x @ W.T with W [rows, K] read once, in place, and one of two epilogues:
//   gate/up: out[m, h] = gelu(x[m]·Wg[h] + bg[h]) * (x[m]·Wu[h] + bu[h])   (tanh or erf)
//   down:    y[m, n]   = h[m]·W[n] + bias[n] + residual[m, n]
// bf16 / fp16 storage, float32 accumulation and epilogue math.
//
// How it reaches the floor (reading the weights once; the few tokens come from L1/L2):
// - Tensor cores through mma.sync m16n8k16 with the swap-AB layout: the weight is the
//   16-row "A" operand, the tokens the 8-column "B" operand (a tile of 8 tokens; M <= 64
//   is 1, 2, 4 or 8 such tiles). The reduction over k may run in any order as long as A
//   and B agree, so each thread loads 16 contiguous bytes (8 k) of a weight row and of a
//   token row and uses them as the k-slots {2t, 2t+1, 2t+8, 2t+9} of two k16 steps: no
//   shared memory, no shuffles, every weight byte moved by one 16-byte load.
//   Thread (g = lane / 4, t = lane % 4) of a warp holds, per 32-k step, rows g and g + 8
//   of each 16-row tile at k + 8t .. k + 8t + 7: a warp instruction reads 8 rows x 64
//   contiguous bytes (the L2::256B hint brings each row's next 192 bytes into L2).
// - GeGLU pairing: a gate/up tile is 8 gate rows (A rows 0-7) and the same 8 up rows
//   (A rows 8-15), so each thread ends with gate and up of the same (token, h) in its
//   accumulators: the nonlinearity needs no exchange.
// - Weight loads stream through a register pipeline D steps deep (L1::no_allocate, L2
//   evict_first): two 32-k steps per warp, ~47 KB in flight per SM at 12 warps.
// - One wave: the host plan (make_plan) sizes the grid from the device's SMs and the
//   kernel's occupancy so that every warp is resident at once and all warps have the
//   same amount of work (no tail of a second wave). Where the rows alone give too few
//   warps (the down GEMM: 2048-3072 rows, 16k-24k K), K is split: first across the 4
//   warps of a block (reduced through shared memory), then across blocks (gridDim.y),
//   whose partial sums go to a float32 workspace and are added, in a fixed order (the
//   result is deterministic), by the last block of each row group to arrive (a counter
//   per row group). A GeGLU split therefore applies the nonlinearity to the full sums.
//
// Status (H100, 2026-11-23, benchmarks/results/decode_h100.log): correct (tests pass) but
// at 60-70% of the copy bandwidth for the weight bytes at M <= 16 (cuBLAS: 72-84%), worse
// at M = 64; serves() is off. A cp.async shared-memory ring (5-10 steps in flight per
// warp, 3x the bytes in flight of this register pipeline) measured slower still (7B
// gate/up M=1 171 us against 143), so bytes in flight are not what bounds it; the lead
// suspect is the access pattern (every warp keeps 32 weight rows open and moves 64 bytes
// of each per step). See the log for the profile still to take.
//
// Everything is CUDA-graph capturable: the workspace and the zeroed counters come from
// the caching allocator (at::empty / at::zeros on the current stream), the plan is a
// function of shapes and device only, and nothing syncs with the host.

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/tensor_checks.h"
#include "geglu_decode.h"
#include "gelu_math.cuh"
#include "vec.cuh"

namespace geglu_decode {
namespace {

constexpr int kWarps = 4;  // per block: wr row tiles x wk K slices (Plan)
constexpr int kThreads = 32 * kWarps;
// 16-row mma tiles per warp: 2 up to 16 tokens (32 weight rows share each token load),
// 1 beyond, where the accumulators (and their registers) grow with the tokens.
template <int MT>
constexpr int kRowTiles = MT >= 4 ? 1 : 2;
constexpr int kStepK = 32;  // k per pipeline step: one 16-byte load per row and thread
constexpr int kMinStepsPerSplit = 8;
constexpr int kMaxSplits = 32;

enum class Epi { kLinear, kGegluTanh, kGegluErf };

struct Params {
  const void *w_lo;  // gate/up: w_gate; down: w
  const void *w_hi;  // gate/up: w_up; down: w (unused)
  int64_t ldw;       // elements between weight rows
  const void *x;
  int64_t ldx;
  const void *b_lo;  // gate/up: b_gate; down: bias (either may be null)
  const void *b_hi;  // gate/up: b_up
  const void *res;   // down: residual or null
  int64_t ldr;
  void *out;
  int64_t ldo;
  float *ws;      // splits > 1: [splits, tiles, kRT * MT * 4, 32] partial sums
  int *counters;  // splits > 1: [gridDim.x], zero on entry; left zero on exit
  int m, k, rows;  // rows: hidden (gate/up) or N (down)
  int tiles;       // row tiles: ceil(rows / rows_per_tile)
  int wr, wk, splits;
};

template <int MT>
constexpr int kMinBlocks = MT >= 8 ? 3 : 4;  // registers: 168 / 128 per thread at most

// Weight steps in flight per warp (register pipeline depth).
template <int MT>
constexpr int kDepth = 2;

struct Vec {
  uint32_t w[4];
};

__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

// A weight load: read once, so it allocates nothing in L1 and goes first out of L2.
__device__ __forceinline__ void load_weight(Vec &v, const void *p, uint64_t policy) {
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
               : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3])
               : "l"(p), "l"(policy));
}

// A token load: every warp of the grid reads these, from L1 / L2.
// (volatile: issued in program order after the previous step's weight loads, so that
// the compiler does not hoist a further step's token loads and run out of registers.)
__device__ __forceinline__ Vec load_act(const void *p) {
  Vec v;
  asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3])
               : "l"(p));
  return v;
}

template <typename T>
__device__ __forceinline__ void mma(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                    uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

// One 32-k step: w[r][0] / w[r][1] hold rows g / g + 8 of tile r, x[j] token g of token
// tile j, each at k + 8t .. k + 8t + 7. Words 2s, 2s + 1 of a vector are the k-slots
// {2t, 2t+1} and {2t+8, 2t+9} of k16 step s, for A and B alike.
template <typename T, int MT, int kRT>
__device__ __forceinline__ void step_mma(float (&acc)[kRT][MT][4], const Vec (&w)[kRT][2], const Vec (&x)[MT]) {
#pragma unroll
  for (int s = 0; s < 2; ++s) {
#pragma unroll
    for (int r = 0; r < kRT; ++r) {
#pragma unroll
      for (int j = 0; j < MT; ++j) {
        mma<T>(acc[r][j], w[r][0].w[2 * s], w[r][1].w[2 * s], w[r][0].w[2 * s + 1], w[r][1].w[2 * s + 1],
               x[j].w[2 * s], x[j].w[2 * s + 1]);
      }
    }
  }
}

__device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

template <typename T>
__device__ __forceinline__ float load_float(const void *base, int64_t i) {
  return geglu_cuda::to_float(static_cast<const T *>(base)[i]);
}

template <typename T>
__device__ __forceinline__ T to_storage(float v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(v);
  } else {
    return __float2half_rn(v);
  }
}

template <typename T, int MT, Epi E>
__global__ void __launch_bounds__(kThreads, kMinBlocks<MT>) decode_gemm_kernel(const Params p) {
  constexpr bool kGeglu = E != Epi::kLinear;
  constexpr int kRT = kRowTiles<MT>;
  constexpr int D = kDepth<MT>;
  constexpr int kAcc = kRT * MT * 4;
  extern __shared__ float reduce_smem[];  // (wk - 1) * wr * kAcc * 32 floats
  __shared__ int last_block;

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int wr = warp % p.wr, wk = warp / p.wr;
  const int tile = blockIdx.x * p.wr + wr;
  const bool active = tile < p.tiles;  // warp-uniform
  const int n_splits = p.wk * p.splits;
  const int split = blockIdx.y * p.wk + wk;
  // 32-bit: K < 2^30 (host check), so full_steps * n_splits < 2^25 * 64.
  const int full_steps = p.k / kStepK;
  const int s_begin = full_steps * split / n_splits;
  const int n_steps = full_steps * (split + 1) / n_splits - s_begin;
  const int k_tail = p.k - full_steps * kStepK;  // 0, 8, 16 or 24

  float acc[kRT][MT][4];
#pragma unroll
  for (int r = 0; r < kRT; ++r)
#pragma unroll
    for (int j = 0; j < MT; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[r][j][c] = 0.0f;

  if (active) {
    const T *wp[kRT][2];  // rows g and g + 8 of each tile, at k = 8t
#pragma unroll
    for (int r = 0; r < kRT; ++r) {
      if constexpr (kGeglu) {
        const int64_t h = min64(static_cast<int64_t>(tile) * 8 * kRT + 8 * r + g, p.rows - 1);
        wp[r][0] = static_cast<const T *>(p.w_lo) + h * p.ldw + 8 * t;
        wp[r][1] = static_cast<const T *>(p.w_hi) + h * p.ldw + 8 * t;
      } else {
        const int64_t n = static_cast<int64_t>(tile) * 16 * kRT + 16 * r + g;
        wp[r][0] = static_cast<const T *>(p.w_lo) + min64(n, p.rows - 1) * p.ldw + 8 * t;
        wp[r][1] = static_cast<const T *>(p.w_lo) + min64(n + 8, p.rows - 1) * p.ldw + 8 * t;
      }
    }
    // Token g of each token tile, as 32-bit offsets from one pointer (the host checks
    // (M - 1) * ldx < 2^31); tokens past M repeat row M - 1, whose results are never stored.
    int xoff[MT];
#pragma unroll
    for (int j = 0; j < MT; ++j) xoff[j] = static_cast<int>(min64(8 * j + g, p.m - 1) * p.ldx);
    const uint64_t policy = evict_first_policy();
    const int64_t k0 = static_cast<int64_t>(s_begin) * kStepK;
    // Row pointers at the first k of this split.
    const T *wq[kRT][2];
#pragma unroll
    for (int r = 0; r < kRT; ++r)
#pragma unroll
      for (int h = 0; h < 2; ++h) wq[r][h] = wp[r][h] + k0;
    const T *xq = static_cast<const T *>(p.x) + 8 * t + k0;

    if (k_tail != 0 && split == n_splits - 1) {  // the last 8-24 k (first: nothing lives across the loop)
      const int64_t kk = static_cast<int64_t>(n_steps) * kStepK;  // = full_steps * 32 - k0
      const bool valid = 8 * t < k_tail;
      Vec wv[kRT][2], xv[MT];
#pragma unroll
      for (int r = 0; r < kRT; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          wv[r][h] = Vec{{0u, 0u, 0u, 0u}};
          if (valid) load_weight(wv[r][h], wq[r][h] + kk, policy);
        }
#pragma unroll
      for (int j = 0; j < MT; ++j) xv[j] = valid ? load_act(xq + xoff[j] + kk) : Vec{{0u, 0u, 0u, 0u}};
      step_mma<T, MT, kRT>(acc, wv, xv);
    }
    // Register pipeline, D = 2 steps deep: step i is in wb[i % 2] while step i + 1 loads.
    // Prefetch addresses past the last step are clamped to it (a cached re-read), so the
    // loop has no conditional loads.
    static_assert(D == 2, "the loop below is written for two buffers");
    Vec wb[D][kRT][2];
    if (n_steps > 0) {
#pragma unroll
      for (int d = 0; d < D; ++d) {
        const int64_t off = static_cast<int64_t>(min64(d, n_steps - 1)) * kStepK;
#pragma unroll
        for (int r = 0; r < kRT; ++r)
#pragma unroll
          for (int h = 0; h < 2; ++h) load_weight(wb[d][r][h], wq[r][h] + off, policy);
      }
    }
    int i = 0;
#pragma unroll 1
    for (; i + D <= n_steps; i += D) {
#pragma unroll
      for (int d = 0; d < D; ++d) {
        Vec xv[MT];
#pragma unroll
        for (int j = 0; j < MT; ++j) xv[j] = load_act(xq + xoff[j] + static_cast<int64_t>(i + d) * kStepK);
        step_mma<T, MT, kRT>(acc, wb[d], xv);
        const int64_t off = min64(i + d + D, n_steps - 1) * kStepK;
#pragma unroll
        for (int r = 0; r < kRT; ++r)
#pragma unroll
          for (int h = 0; h < 2; ++h) load_weight(wb[d][r][h], wq[r][h] + off, policy);
      }
    }
    if (i < n_steps) {  // an odd step count: the last step sits in wb[0]
      Vec xv[MT];
#pragma unroll
      for (int j = 0; j < MT; ++j) xv[j] = load_act(xq + xoff[j] + static_cast<int64_t>(i) * kStepK);
      step_mma<T, MT, kRT>(acc, wb[0], xv);
    }
  }

  // K slices of one block: warps wk > 0 hand their sums to warp wk = 0 (fixed order).
  if (p.wk > 1) {
    if (wk > 0) {
      float *dst = reduce_smem + static_cast<int64_t>((wk - 1) * p.wr + wr) * kAcc * 32 + lane;
#pragma unroll
      for (int r = 0; r < kRT; ++r)
#pragma unroll
        for (int j = 0; j < MT; ++j)
#pragma unroll
          for (int c = 0; c < 4; ++c) dst[((r * MT + j) * 4 + c) * 32] = acc[r][j][c];
    }
    __syncthreads();
    if (wk == 0) {
#pragma unroll 1
      for (int q = 1; q < p.wk; ++q) {
        const float *src = reduce_smem + static_cast<int64_t>((q - 1) * p.wr + wr) * kAcc * 32 + lane;
#pragma unroll
        for (int r = 0; r < kRT; ++r)
#pragma unroll
          for (int j = 0; j < MT; ++j)
#pragma unroll
            for (int c = 0; c < 4; ++c) acc[r][j][c] += src[((r * MT + j) * 4 + c) * 32];
      }
    }
  }

  // K slices across blocks: partial sums to the workspace; the last block of the row
  // group to arrive adds them up in split order (deterministic) and runs the epilogue.
  if (p.splits > 1) {
    const bool owner = wk == 0 && active;
    if (owner) {
      float *dst = p.ws + (static_cast<int64_t>(blockIdx.y) * p.tiles + tile) * kAcc * 32 + lane;
#pragma unroll
      for (int r = 0; r < kRT; ++r)
#pragma unroll
        for (int j = 0; j < MT; ++j)
#pragma unroll
          for (int c = 0; c < 4; ++c) __stcg(dst + ((r * MT + j) * 4 + c) * 32, acc[r][j][c]);
      __threadfence();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      const int arrived = atomicAdd(p.counters + blockIdx.x, 1);
      last_block = arrived == p.splits - 1;
      if (last_block) p.counters[blockIdx.x] = 0;  // ready for reuse
    }
    __syncthreads();
    if (!last_block) return;
    __threadfence();
    if (owner) {  // every partial from the workspace (own included), in split order
#pragma unroll
      for (int r = 0; r < kRT; ++r)
#pragma unroll
        for (int j = 0; j < MT; ++j)
#pragma unroll
          for (int c = 0; c < 4; ++c) acc[r][j][c] = 0.0f;
#pragma unroll 1
      for (int s = 0; s < p.splits; ++s) {
        const float *src = p.ws + (static_cast<int64_t>(s) * p.tiles + tile) * kAcc * 32 + lane;
#pragma unroll
        for (int r = 0; r < kRT; ++r)
#pragma unroll
          for (int j = 0; j < MT; ++j)
#pragma unroll
            for (int c = 0; c < 4; ++c) acc[r][j][c] += __ldcg(src + ((r * MT + j) * 4 + c) * 32);
      }
    }
  }
  if (wk != 0 || !active) return;

  // Epilogue. acc[r][j] = {(row g, token m0), (row g, m0 + 1), (row g + 8, m0), (row g + 8, m0 + 1)}
  // of tile r, m0 = 8j + 2t; for gate/up, row g is gate h and row g + 8 up h.
  T *out = static_cast<T *>(p.out);
#pragma unroll
  for (int r = 0; r < kRT; ++r) {
    if constexpr (kGeglu) {
      const int h = tile * 8 * kRT + 8 * r + g;
      if (h >= p.rows) continue;
      const float bg = p.b_lo ? load_float<T>(p.b_lo, h) : 0.0f;
      const float bu = p.b_hi ? load_float<T>(p.b_hi, h) : 0.0f;
#pragma unroll
      for (int j = 0; j < MT; ++j)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int m = 8 * j + 2 * t + c;
          if (m < p.m) {
            const float gate = acc[r][j][c] + bg, up = acc[r][j][2 + c] + bu;
            out[static_cast<int64_t>(m) * p.ldo + h] = to_storage<T>(geglu_cuda::gelu<E == Epi::kGegluTanh>(gate) * up);
          }
        }
    } else {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int n = tile * 16 * kRT + 16 * r + 8 * half + g;
        if (n >= p.rows) continue;
        const float b = p.b_lo ? load_float<T>(p.b_lo, n) : 0.0f;
#pragma unroll
        for (int j = 0; j < MT; ++j)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const int m = 8 * j + 2 * t + c;
            if (m < p.m) {
              float v = acc[r][j][2 * half + c] + b;
              if (p.res) v += load_float<T>(p.res, static_cast<int64_t>(m) * p.ldr + n);
              out[static_cast<int64_t>(m) * p.ldo + n] = to_storage<T>(v);
            }
          }
      }
    }
  }
}

// ----------------------------------------------------------------------------- host

constexpr c10::DeviceType kCuda = c10::DeviceType::CUDA;
constexpr int kMaxDevices = 64;

int sm_count(int device) {
  static std::array<std::atomic<int>, kMaxDevices> cache{};
  if (device < 0 || device >= kMaxDevices) {
    int n = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
    return n;
  }
  int n = cache[device].load(std::memory_order_relaxed);
  if (n == 0) {
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
    cache[device].store(n, std::memory_order_relaxed);
  }
  return n;
}

struct Plan {
  int wr = 4, wk = 1, splits = 1;
  int64_t grid_x = 1;
};

// K splits z (a power of two): the most for which every warp is resident at once
// (tiles * z <= resident warps), with >= kMinStepsPerSplit steps each. z <= 4 splits
// within a block (no workspace); beyond, across blocks too. Large M keeps 2 row tiles
// per block so that their warps share the token loads through L1.
Plan make_plan(int64_t tiles, int64_t full_steps, int64_t resident_warps, int mt) {
  int z = 1;
  while (z < kMaxSplits && tiles * 2 * z <= resident_warps && full_steps >= 2 * z * kMinStepsPerSplit) z *= 2;
  Plan plan;
  if (z <= kWarps) {
    plan.wk = z;
    plan.wr = kWarps / z;
    plan.splits = 1;
  } else {
    plan.wr = mt >= 4 ? 2 : 1;
    plan.wk = kWarps / plan.wr;
    plan.splits = z / plan.wk;
  }
  plan.grid_x = (tiles + plan.wr - 1) / plan.wr;
  return plan;
}

template <typename T, int MT, Epi E>
void launch_typed(Params p, const at::TensorOptions &options) {
  const auto kernel = decode_gemm_kernel<T, MT, E>;
  constexpr int kRT = kRowTiles<MT>;
  constexpr int kAcc = kRT * MT * 4;
  const int64_t rows_per_tile = (E == Epi::kLinear ? 16 : 8) * kRT;
  p.tiles = static_cast<int>((p.rows + rows_per_tile - 1) / rows_per_tile);
  const int device = options.device().index();
  static std::array<std::atomic<int>, kMaxDevices> occupancy_cache{};
  int blocks_per_sm = device >= 0 && device < kMaxDevices ? occupancy_cache[device].load(std::memory_order_relaxed) : 0;
  if (blocks_per_sm == 0) {
    // Shared memory never limits: at most 3 * 32 * 32 * 4 = 12 KB per block.
    C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, kernel, kThreads, 0));
    blocks_per_sm = std::max(blocks_per_sm, 1);
    if (device >= 0 && device < kMaxDevices) occupancy_cache[device].store(blocks_per_sm, std::memory_order_relaxed);
  }
  const int64_t resident_warps = static_cast<int64_t>(blocks_per_sm) * sm_count(device) * kWarps;
  const Plan plan = make_plan(p.tiles, p.k / kStepK, resident_warps, MT);
  p.wr = plan.wr;
  p.wk = plan.wk;
  p.splits = plan.splits;
  at::Tensor workspace, counters;
  if (plan.splits > 1) {
    workspace = at::empty({static_cast<int64_t>(plan.splits) * p.tiles * kAcc * 32}, options.dtype(at::kFloat));
    counters = at::zeros({plan.grid_x}, options.dtype(at::kInt));
    p.ws = workspace.data_ptr<float>();
    p.counters = counters.data_ptr<int>();
  }
  const size_t smem = static_cast<size_t>(plan.wk - 1) * plan.wr * kAcc * 32 * sizeof(float);
  TORCH_CHECK(plan.grid_x <= INT32_MAX, "geglu_decode: too many rows for one launch");
  const dim3 grid(static_cast<unsigned>(plan.grid_x), static_cast<unsigned>(plan.splits));
  kernel<<<grid, kThreads, smem, c10::cuda::getCurrentCUDAStream(device).stream()>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <int MT, Epi E>
void launch_mt(const Params &p, at::ScalarType dtype, const at::TensorOptions &options) {
  if (dtype == at::kBFloat16) {
    launch_typed<__nv_bfloat16, MT, E>(p, options);
  } else {
    launch_typed<__half, MT, E>(p, options);
  }
}

template <Epi E>
void launch(const Params &p, at::ScalarType dtype, const at::TensorOptions &options) {
  if (p.m <= 8) {
    launch_mt<1, E>(p, dtype, options);
  } else if (p.m <= 16) {
    launch_mt<2, E>(p, dtype, options);
  } else if (p.m <= 32) {
    launch_mt<4, E>(p, dtype, options);
  } else {
    launch_mt<8, E>(p, dtype, options);
  }
}

void check_dtype(const char *op, const char *name, const at::Tensor &t) {
  const auto dtype = t.scalar_type();
  TORCH_CHECK_VALUE(dtype == at::kBFloat16 || dtype == at::kHalf, op, ": ", name,
                    " must be bfloat16 or float16 for the decode kernels, got ", geglu_checks::dtype_name(dtype));
}

void check_unit_column_stride(const char *op, const char *name, const at::Tensor &t) {
  TORCH_CHECK_VALUE(t.size(-1) <= 1 || t.stride(-1) == 1, op, ": ", name,
                    " must have unit stride in its last dimension, got strides ", t.strides(), " for shape ",
                    t.sizes());
}

void check_2d(const char *op, const char *name, const at::Tensor &t, const char *what) {
  geglu_checks::check_tensor(op, name, t, kCuda);
  TORCH_CHECK_VALUE(t.dim() == 2, op, ": ", name, " must be 2-d ", what, ", got shape ", t.sizes());
}

void check_vector(const char *op, const char *name, const c10::optional<at::Tensor> &b, const at::Tensor &ref,
                  int64_t n) {
  if (!b.has_value()) return;
  geglu_checks::check_matches(op, name, *b, "the weight", ref, {n}, kCuda);
  TORCH_CHECK_VALUE(n <= 1 || b->stride(0) == 1, op, ": ", name, " must be contiguous, got stride ", b->stride(0));
}

void check_tokens(const char *op, const char *name, int64_t m) {
  TORCH_CHECK_VALUE(m <= kMaxTokens, op, ": ", name, " has ", m, " rows (tokens); the decode kernels take at most ",
                    kMaxTokens);
}

void check_aligned(const char *op, const char *name, const at::Tensor &t) {
  TORCH_CHECK(aligned16(t), op, ": ", name,
              " must be 16-byte aligned for the decode kernels' vector loads (base address, row stride and "
              "row width a multiple of 16 bytes), got shape ",
              t.sizes(), ", strides ", t.strides(), ", storage offset ", t.storage_offset());
}

void check_token_stride(const char *op, const char *name, int64_t m, int64_t ld) {
  TORCH_CHECK_VALUE((m - 1) * ld < (int64_t{1} << 31), op, ": ", name, " rows must lie within 2^31 elements of its first (",
                    m, " rows, row stride ", ld, "); call .contiguous() first");
}

void check_sizes_fit(const char *op, int64_t k, int64_t rows) {
  TORCH_CHECK_VALUE(k < (int64_t{1} << 30) && rows < (int64_t{1} << 30), op, ": in_features (", k, ") and rows (",
                    rows, ") must be below 2^30");
}

}  // namespace

bool aligned16(const at::Tensor &t) {
  if (!t.defined() || t.dim() != 2) return false;
  const int64_t es = static_cast<int64_t>(t.element_size());
  const auto addr = reinterpret_cast<uintptr_t>(t.data_ptr());
  return addr % 16 == 0 && (t.size(1) <= 1 || t.stride(1) == 1) && (t.size(1) * es) % 16 == 0 &&
         (t.size(0) <= 1 || (t.stride(0) * es) % 16 == 0);
}

// Measured on the H100 (benchmarks/results/decode_h100.log, 2026-11-23): these kernels
// lose to cuBLAS at every shape timed (M = 1..64; Gemma-2B/7B, 768 -> 3072, 512 -> 1024):
// gate/up 16x3072->2x24576 159.8 us against one cuBLAS GEMM of the merged weight 120.9;
// down 16x24576->3072 90.8 against addmm 72.1; at M = 1 143 vs 121 and 82 vs 72. So no
// problem is served yet: the router keeps the GEMM routes. kServing turns the rule on
// once the kernels win (the conditions below are what they take).
constexpr bool kServing = false;

bool serves(int64_t m, int64_t k, int64_t n_out, at::ScalarType dtype) {
  if (!kServing) return false;
  if (dtype != at::kBFloat16 && dtype != at::kHalf) return false;
  return m >= 1 && m <= kMaxTokens && k >= 8 && k % 8 == 0 && n_out >= 1;
}

at::Tensor gate_up(const at::Tensor &x, const at::Tensor &w_gate, const at::Tensor &w_up,
                   const c10::optional<at::Tensor> &b_gate, const c10::optional<at::Tensor> &b_up, bool tanh) {
  constexpr const char *kOp = "_geglu_decode_gate_up";
  check_2d(kOp, "x", x, "[tokens, in_features]");
  check_dtype(kOp, "x", x);
  check_2d(kOp, "w_gate", w_gate, "[hidden, in_features]");
  const int64_t m = x.size(0), k = x.size(1), hidden = w_gate.size(0);
  geglu_checks::check_matches(kOp, "w_gate", w_gate, "x", x, {hidden, k}, kCuda);
  geglu_checks::check_matches(kOp, "w_up", w_up, "x", x, {hidden, k}, kCuda);
  check_unit_column_stride(kOp, "x", x);
  check_unit_column_stride(kOp, "w_gate", w_gate);
  check_unit_column_stride(kOp, "w_up", w_up);
  TORCH_CHECK_VALUE(hidden <= 1 || w_gate.stride(0) == w_up.stride(0), kOp,
                    ": w_gate and w_up must share one row stride, got ", w_gate.stride(0), " and ", w_up.stride(0));
  check_vector(kOp, "b_gate", b_gate, w_gate, hidden);
  check_vector(kOp, "b_up", b_up, w_gate, hidden);
  check_tokens(kOp, "x", m);
  check_sizes_fit(kOp, k, hidden);

  const c10::cuda::CUDAGuard guard(x.device());
  auto out = at::empty({m, hidden}, x.options());
  if (m == 0 || hidden == 0) return out;
  check_aligned(kOp, "x", x);
  check_aligned(kOp, "w_gate", w_gate);
  check_aligned(kOp, "w_up", w_up);

  Params p{};
  p.w_lo = w_gate.data_ptr();
  p.w_hi = w_up.data_ptr();
  p.ldw = hidden > 1 ? w_gate.stride(0) : k;
  p.x = x.data_ptr();
  p.ldx = m > 1 ? x.stride(0) : k;
  check_token_stride(kOp, "x", m, p.ldx);
  p.b_lo = b_gate.has_value() ? b_gate->data_ptr() : nullptr;
  p.b_hi = b_up.has_value() ? b_up->data_ptr() : nullptr;
  p.out = out.data_ptr();
  p.ldo = hidden;
  p.m = static_cast<int>(m);
  p.k = static_cast<int>(k);
  p.rows = static_cast<int>(hidden);
  if (tanh) {
    launch<Epi::kGegluTanh>(p, x.scalar_type(), x.options());
  } else {
    launch<Epi::kGegluErf>(p, x.scalar_type(), x.options());
  }
  return out;
}

at::Tensor linear(const at::Tensor &h, const at::Tensor &w, const c10::optional<at::Tensor> &bias,
                  const c10::optional<at::Tensor> &residual) {
  constexpr const char *kOp = "_geglu_decode_linear";
  check_2d(kOp, "h", h, "[tokens, in_features]");
  check_dtype(kOp, "h", h);
  check_2d(kOp, "w", w, "[out_features, in_features]");
  const int64_t m = h.size(0), k = h.size(1), n = w.size(0);
  geglu_checks::check_matches(kOp, "w", w, "h", h, {n, k}, kCuda);
  check_unit_column_stride(kOp, "h", h);
  check_unit_column_stride(kOp, "w", w);
  check_vector(kOp, "bias", bias, w, n);
  if (residual.has_value()) {
    geglu_checks::check_matches(kOp, "residual", *residual, "h", h, {m, n}, kCuda);
    check_unit_column_stride(kOp, "residual", *residual);
  }
  check_tokens(kOp, "h", m);
  check_sizes_fit(kOp, k, n);

  const c10::cuda::CUDAGuard guard(h.device());
  auto out = at::empty({m, n}, h.options());
  if (m == 0 || n == 0) return out;
  check_aligned(kOp, "h", h);
  check_aligned(kOp, "w", w);

  Params p{};
  p.w_lo = w.data_ptr();
  p.w_hi = nullptr;
  p.ldw = n > 1 ? w.stride(0) : k;
  p.x = h.data_ptr();
  p.ldx = m > 1 ? h.stride(0) : k;
  check_token_stride(kOp, "h", m, p.ldx);
  p.b_lo = bias.has_value() ? bias->data_ptr() : nullptr;
  p.b_hi = nullptr;
  p.res = residual.has_value() ? residual->data_ptr() : nullptr;
  p.ldr = residual.has_value() && m > 1 ? residual->stride(0) : n;
  p.out = out.data_ptr();
  p.ldo = n;
  p.m = static_cast<int>(m);
  p.k = static_cast<int>(k);
  p.rows = static_cast<int>(n);
  launch<Epi::kLinear>(p, h.scalar_type(), h.options());
  return out;
}

}  // namespace geglu_decode
