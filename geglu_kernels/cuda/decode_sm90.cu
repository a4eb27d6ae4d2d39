// Small-M GEMMs for decode on Hopper: the kernel and its two C launchers (decode_sm90.h).
//
// At M <= 64 tokens the MLP's GEMMs are weight reads (Gemma-7B at 16 tokens: 453 MB of
// weights, ~4.8 GFLOP), so the kernel is built around the weight stream:
// - Swap-AB on mma.sync m16n8k16: the weight rows are the A operand's 16 rows, the tokens
//   the B operand's 8 columns (one n-tile per 8 tokens). Tensor cores keep the math far
//   below the load time even at 64 tokens, where CUDA-core FMAs would not.
// - Loads straight into the mma fragments, no shared memory: K is permuted per thread.
//   A dot product may sum its K in any order as long as both operands use the same one,
//   so lane (g, q) = (lane / 4, lane % 4) loads 16 consecutive K elements of its rows
//   (two 16-byte loads; a quad covers a 128-byte line of each row) and feeds them to
//   four k16 steps, elements 4s..4s+3 in the fragment slots that stand for k = 2q, 2q+1,
//   2q+8, 2q+9 of step s. The token operand is loaded with the same permutation, which
//   makes its slots 16 consecutive elements of one token row too.
// - Weights bypass L1 (ld.global.nc.L1::no_allocate): they are read once, and the tokens
//   (M x K, reread by every block) stay in L1.
// - Rows: a block owns 16 weight rows, the mma's; for the GeGLU, 8 gate rows (A rows
//   0-7) and the same 8 up rows (A rows 8-15), so each lane ends with matching gate and
//   up sums in its accumulators. Its 8 warps split the block's K range (interleaved
//   64-element chunks, so the block reads each row front to back) and add their sums in
//   shared memory.
// - When the row blocks are too few to fill the GPU (the down projection: 2048-3072 rows
//   over 16384-24576 K), the K range is split further over a cluster of up to 8 blocks
//   (grid y); the cluster adds its partial sums through distributed shared memory:
//   deterministic, no workspace, no second kernel.
// - Epilogue in float32 from the summed accumulators: bias, GeGLU or residual, one
//   rounding to the storage type. Stores are 2-byte scatters; the outputs are ~1/1000 of
//   the bytes.
//
// Build: part of the geglu_gemm_sm90 kernel (build.toml), -gencode arch=compute_90a.

#include "decode_sm90.h"

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "gelu_math.cuh"
#include "sm90_launcher.cuh"

namespace geglu_decode {
namespace cg = cooperative_groups;

constexpr int kWarps = 8;     // per block, splitting its K range
constexpr int kThreads = kWarps * 32;
constexpr int kChunk = 64;    // K elements of a row a quad loads per step (4 lanes x 16)
constexpr int kStride = kWarps * kChunk;  // between a warp's consecutive chunks
#ifndef DECODE_UNROLL
#define DECODE_UNROLL 2
#endif
#ifndef DECODE_PIPELINE
#define DECODE_PIPELINE 1
#endif
constexpr int kUnroll = DECODE_UNROLL;  // chunks per row a warp loads at once
constexpr bool kPipeline = DECODE_PIPELINE;  // load the next chunks before using these
#ifndef DECODE_GROUPS
#define DECODE_GROUPS 2
#endif
constexpr int kGroups = DECODE_GROUPS;  // 16-row weight groups per block (token loads reused)
constexpr int kMaxSplit = 8;  // blocks per cluster (the portable cluster size)

struct Params {
  const void* x;
  const void* w0;  // GeGLU: gate rows; linear: the weight
  const void* w1;  // GeGLU: up rows
  const void* b0;
  const void* b1;
  const void* residual;
  void* out;
  int64_t ldx, ldw, ldr, ldo;
  int M, K, rows;  // rows: H (GeGLU) or N (linear), the output's columns
  int k_split;     // K elements per cluster rank, a multiple of kChunk
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
// groups (a quad's 128-byte line and the next warp's).
__device__ __forceinline__ uint4 load_weight(const void* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// NT n-tiles of 8 tokens (M <= 8 NT), kGroups groups of 16 weight rows per block.
// kGeglu: the gate/up GEMM with the GeGLU epilogue; else the linear with bias and
// residual.
template <class T, int NT, bool kGeglu, bool kTanh>
__global__ void __launch_bounds__(kThreads) decode_gemm(const Params p) {
  using S = Storage<T>;
  constexpr int R = kGroups;
  constexpr int kSums = R * NT * 4 * 32;  // a block's accumulators: [group][n-tile][reg][lane]
  __shared__ float partial[kSums];        // the block's sums, what the cluster adds
  __shared__ float warp_sums[kWarps][kSums];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, q = lane % 4;
  // This lane's two A rows (mma rows g and g + 8) in each group.
  const T* wa[R];
  const T* wb[R];
  bool ok_a[R], ok_b[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    int64_t row_a, row_b;
    if constexpr (kGeglu) {  // gate row and up row of one hidden unit
      row_a = row_b = (int64_t(blockIdx.x) * R + r) * 8 + g;
    } else {
      row_a = (int64_t(blockIdx.x) * R + r) * 16 + g;
      row_b = row_a + 8;
    }
    ok_a[r] = row_a < p.rows;
    ok_b[r] = row_b < p.rows;
    wa[r] = static_cast<const T*>(p.w0) + (ok_a[r] ? row_a : 0) * p.ldw;
    wb[r] = static_cast<const T*>(kGeglu ? p.w1 : p.w0) + (ok_b[r] ? row_b : 0) * p.ldw;
  }
  const T* x = static_cast<const T*>(p.x);

  const int k_begin = blockIdx.y * p.k_split;
  const int k_end = min(p.K, k_begin + p.k_split);
  const uint4 zero = make_uint4(0, 0, 0, 0);

  float acc[R][NT][4];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[r][t][i] = 0.0f;

  // A warp's chunks start at k_begin + (warp + i kWarps) kChunk, kUnroll of them per
  // step; the loop bound is the warp's (mma.sync needs all 32 lanes). A lane's 16
  // elements of a chunk are two 8-element segments, at 8q and 32 + 8q: each load
  // instruction then covers whole 32-byte sectors (a quad reads 64 contiguous bytes of a
  // row), and each is tested against k_end on its own.
  using Weights = uint4[kUnroll][R][2][2];  // [chunk][group][row a, row b][segment]
  auto load = [&](Weights& a, int c0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        const int k = c0 + u * kStride + 8 * q + 32 * s;  // K and k_end are multiples of 8
#pragma unroll
        for (int r = 0; r < R; ++r) {
          a[u][r][0][s] = ok_a[r] && k < k_end ? load_weight(wa[r] + k) : zero;
          a[u][r][1][s] = ok_b[r] && k < k_end ? load_weight(wb[r] + k) : zero;
        }
      }
  };
  auto multiply = [&](const Weights& a, int c0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        const int token = t * 8 + g;
        uint4 b[2];
#pragma unroll
        for (int s = 0; s < 2; ++s) {
          const int k = c0 + u * kStride + 8 * q + 32 * s;
          b[s] = token < p.M && k < k_end ? __ldg(reinterpret_cast<const uint4*>(x + token * p.ldx + k)) : zero;
        }
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
          for (int step = 0; step < 4; ++step) {
            const int s = step / 2, w = (step % 2) * 2;
            S::mma(acc[r][t], word(a[u][r][0][s], w), word(a[u][r][1][s], w), word(a[u][r][0][s], w + 1),
                   word(a[u][r][1][s], w + 1), word(b[s], w), word(b[s], w + 1));
          }
      }
  };
  constexpr int kStep = kUnroll * kStride;
  if constexpr (kPipeline) {
    Weights cur;
    load(cur, k_begin + warp * kChunk);
    for (int c0 = k_begin + warp * kChunk; c0 < k_end; c0 += kStep) {
      Weights next;
      load(next, c0 + kStep);  // past k_end: zeros, no access
      multiply(cur, c0);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
          for (int i = 0; i < 4; ++i) (&cur[u][r][0][0])[i] = (&next[u][r][0][0])[i];
    }
  } else {
    for (int c0 = k_begin + warp * kChunk; c0 < k_end; c0 += kStep) {
      Weights a;
      load(a, c0);
      multiply(a, c0);
    }
  }

  // The block's sum over its warps.
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
      for (int i = 0; i < 4; ++i) warp_sums[warp][((r * NT + t) * 4 + i) * 32 + lane] = acc[r][t][i];
  __syncthreads();
  for (int e = threadIdx.x; e < kSums; e += kThreads) {
    float s = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) s += warp_sums[w][e];
    partial[e] = s;
  }

  // The cluster's sum (gridDim.y ranks, one cluster), each rank finishing 1/gridDim.y of
  // the outputs from every rank's partial sums.
  const int split = gridDim.y;
  const int rank = blockIdx.y;
  cg::cluster_group cluster = cg::this_cluster();
  if (split > 1) {
    cluster.sync();
  } else {
    __syncthreads();
  }
  auto total = [&](int e) {
    if (split == 1) return partial[e];
    float s = 0.0f;
    for (int r = 0; r < split; ++r) s += cluster.map_shared_rank(partial, r)[e];
    return s;
  };

  T* out = static_cast<T*>(p.out);
  if constexpr (kGeglu) {
    // Output o = (group, t, j, lane): gate sum (group, t, reg j, lane) and up sum (reg
    // j + 2), hidden unit 8 (R blockIdx.x + group) + g, token 8t + 2q + j.
    for (int o = rank + split * threadIdx.x; o < kSums / 2; o += split * kThreads) {
      const int rt = o / 64, j = (o / 32) % 2, l = o % 32;
      const int token = (rt % NT) * 8 + 2 * (l % 4) + j;
      const int64_t col = (int64_t(blockIdx.x) * R + rt / NT) * 8 + l / 4;
      if (token >= p.M || col >= p.rows) continue;
      float gate = total((rt * 4 + j) * 32 + l), up = total((rt * 4 + j + 2) * 32 + l);
      if (p.b0) gate += S::to_float(static_cast<const T*>(p.b0)[col]);
      if (p.b1) up += S::to_float(static_cast<const T*>(p.b1)[col]);
      out[token * p.ldo + col] = S::from_float(geglu_cuda::gelu<kTanh>(gate) * up);
    }
  } else {
    // Output o = (group, t, reg, lane): weight row 16 (R blockIdx.x + group) + g (+ 8 for
    // reg >= 2), token 8t + 2q + reg % 2.
    for (int o = rank + split * threadIdx.x; o < kSums; o += split * kThreads) {
      const int rt = o / 128, i = (o / 32) % 4, l = o % 32;
      const int token = (rt % NT) * 8 + 2 * (l % 4) + (i % 2);
      const int64_t col = (int64_t(blockIdx.x) * R + rt / NT) * 16 + l / 4 + (i / 2) * 8;
      if (token >= p.M || col >= p.rows) continue;
      float v = total(o);
      if (p.b0) v += S::to_float(static_cast<const T*>(p.b0)[col]);
      if (p.residual) v += S::to_float(static_cast<const T*>(p.residual)[token * p.ldr + col]);
      out[token * p.ldo + col] = S::from_float(v);
    }
  }
  if (split > 1) cluster.sync();  // keep this block's partial sums alive for the others
}

using KernelFn = void (*)(Params);

template <class T, bool kGeglu, bool kTanh>
KernelFn kernel_for(int m) {
  return m <= 8 ? decode_gemm<T, 1, kGeglu, kTanh> : decode_gemm<T, 2, kGeglu, kTanh>;
}

bool aligned(const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// Blocks of `fn` resident per SM on `device` (asked once per kernel and device; 0 if CUDA
// refused).
int blocks_per_sm(KernelFn fn, int device) {
  struct Entry {
    KernelFn fn;
    int device, blocks;
  };
  static std::mutex mu;
  static std::vector<Entry> known;
  std::lock_guard<std::mutex> lock(mu);
  for (const Entry& e : known) {
    if (e.fn == fn && e.device == device) return e.blocks;
  }
  int blocks = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, fn, kThreads, 0) != cudaSuccess) {
    sm90_launcher::record_cuda_error(cudaGetLastError());
    return 0;
  }
  known.push_back({fn, device, blocks});
  if (getenv("DECODE_DEBUG")) fprintf(stderr, "decode kernel %p: %d blocks/SM\n", (void*)fn, blocks);
  return blocks;
}

// The K split: where the row blocks are fewer than the GPU holds at once, enough
// cluster ranks to fill it (rounded: a second partial wave costs more than a few idle
// slots), each warp keeping at least one chunk. `config` > 0 overrides it (tuning).
int pick_split(int64_t row_blocks, int64_t K, int64_t resident, int config) {
  if (config > 0) return config;
  const int64_t want = (2 * resident + row_blocks) / (2 * row_blocks);
  const int64_t most = (K + kStride - 1) / kStride;
  return int(std::max<int64_t>(1, std::min<int64_t>({want, most, kMaxSplit})));
}

int launch(bool geglu, Params p, int64_t M, int64_t K, int64_t rows, int dtype, bool tanh, int config,
           void* stream) {
  using namespace sm90_launcher;
  if (dtype != GEGLU_SM90_BF16 && dtype != GEGLU_SM90_FP16) return GEGLU_SM90_ERR_DTYPE;
  constexpr int64_t kMax = (int64_t(1) << 31) - 1;
  if (M < 0 || M > GEGLU_DECODE_MAX_M || K < 1 || rows < 1 || K > kMax || rows > kMax || p.ldx < K ||
      p.ldw < K) {
    return GEGLU_SM90_ERR_SHAPE;
  }
  if (K % 8 != 0 || p.ldx % 8 != 0 || p.ldw % 8 != 0) return GEGLU_SM90_ERR_STRIDE;
  if (!aligned(p.x, 16) || !aligned(p.w0, 16) || (geglu && !aligned(p.w1, 16)) || p.out == nullptr ||
      !aligned(p.out, 2) || !aligned(p.b0, 2) || !aligned(p.b1, 2) || !aligned(p.residual, 2)) {
    return GEGLU_SM90_ERR_ALIGN;
  }
  if (config < -1 || config == 0 || config > kMaxSplit) return GEGLU_SM90_ERR_CONFIG;
  int device = 0;
  DeviceInfo const* info = current_sm90_device(&device);
  if (info == nullptr) return GEGLU_SM90_ERR_DEVICE;
  if (M == 0) return GEGLU_SM90_OK;
  p.M = int(M);
  p.K = int(K);
  p.rows = int(rows);

  const bool bf16 = dtype == GEGLU_SM90_BF16;
  KernelFn fn;
  if (geglu) {
    fn = bf16 ? (tanh ? kernel_for<__nv_bfloat16, true, true>(p.M) : kernel_for<__nv_bfloat16, true, false>(p.M))
              : (tanh ? kernel_for<__half, true, true>(p.M) : kernel_for<__half, true, false>(p.M));
  } else {
    fn = bf16 ? kernel_for<__nv_bfloat16, false, false>(p.M) : kernel_for<__half, false, false>(p.M);
  }
  const int resident = blocks_per_sm(fn, device);
  if (resident == 0) return GEGLU_SM90_ERR_CUDA;

  const int64_t rows_per_block = (geglu ? 8 : 16) * kGroups;
  const int64_t row_blocks = (rows + rows_per_block - 1) / rows_per_block;
  if (row_blocks > 0x7fffffff) return GEGLU_SM90_ERR_SHAPE;
  const int split = pick_split(row_blocks, K, int64_t(resident) * info->sm_count, config);
  const int64_t per_split = (K + split - 1) / split;
  p.k_split = int((per_split + kChunk - 1) / kChunk * kChunk);

  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(unsigned(row_blocks), unsigned(split), 1);
  cfg.blockDim = dim3(kThreads, 1, 1);
  cfg.stream = static_cast<cudaStream_t>(stream);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 1;
  attr[0].val.clusterDim.y = unsigned(split);
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  void* args[] = {&p};
  const cudaError_t e = cudaLaunchKernelExC(&cfg, reinterpret_cast<const void*>(fn), args);
  if (e != cudaSuccess) {
    record_cuda_error(e);
    return GEGLU_SM90_ERR_CUDA;
  }
  return GEGLU_SM90_OK;
}

}  // namespace geglu_decode

extern "C" int geglu_decode_sm90_gate_up(const void* x, int64_t M, int64_t K, int64_t ldx, const void* w_gate,
                                         const void* w_up, int64_t ldw, const void* b_gate, const void* b_up,
                                         void* out, int64_t H, int64_t ldo, int dtype, int approximate,
                                         int config, void* stream) {
  geglu_decode::Params p{};
  p.x = x;
  p.w0 = w_gate;
  p.w1 = w_up;
  p.b0 = b_gate;
  p.b1 = b_up;
  p.out = out;
  p.ldx = ldx;
  p.ldw = ldw;
  p.ldo = ldo;
  if (ldo < H) return GEGLU_SM90_ERR_SHAPE;
  return geglu_decode::launch(true, p, M, K, H, dtype, approximate != 0, config, stream);
}

extern "C" int geglu_decode_sm90_linear(const void* x, int64_t M, int64_t K, int64_t ldx, const void* w, int64_t N,
                                        int64_t ldw, const void* bias, const void* residual, int64_t ldr, void* out,
                                        int64_t ldo, int dtype, int config, void* stream) {
  geglu_decode::Params p{};
  p.x = x;
  p.w0 = w;
  p.b0 = bias;
  p.residual = residual;
  p.out = out;
  p.ldx = ldx;
  p.ldw = ldw;
  p.ldr = ldr;
  p.ldo = ldo;
  if (ldo < N || (residual != nullptr && ldr < N)) return GEGLU_SM90_ERR_SHAPE;
  return geglu_decode::launch(false, p, M, K, N, dtype, false, config, stream);
}
