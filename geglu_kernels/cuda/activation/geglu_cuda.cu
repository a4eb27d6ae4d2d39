// The elementwise kernel behind every CUDA op (see rowwise.h), and its launcher.
//
// The ops are memory bound, so the kernel is about moving bytes: 16-byte loads and
// stores whenever every pointer and row stride allows (a scalar path otherwise),
// several independent loads in flight per thread, tiles sized to the row length, and
// enough blocks to occupy every SM on decode shapes. Math runs in float32.

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <tuple>

#include "activation/gelu_math.cuh"
#include "activation/rowwise.h"
#include "activation/vec.cuh"

namespace geglu_cuda {
namespace {

// A CUDA error as the exception torch raises as RuntimeError.
void check_cuda(cudaError_t status, const char *what) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // clear it, or the next launch check would report it again
  throw std::runtime_error(std::string("geglu_cuda: ") + what + ": " + cudaGetErrorString(status));
}

// ----------------------------------------------------------------------------- ops
// Each op maps float inputs to float outputs for one element; `apply<T>` knows the
// storage type T of the tensors (the kernel converts T to float and back). kMinBlocksPerSm
// bounds the registers of its kernel (65536 / (256 * blocks) per thread): the forward
// fits 64 with no spills (4 blocks of 256 threads per SM, 128 KB of loads in flight per
// SM); the backward needs ~116 to hold 12 loads and not spill (2 blocks, 96 KB).
// tools/nvcc_check.py reports registers and spills per kernel.
//
// The forward ops are bit for bit what eager PyTorch computes (the activation contract
// of kernels-community/activation): F.gelu is gelu_eager (gelu_math.cuh), and
// gelu(gate) * up is eager's two kernels fused: F.gelu's result rounded to T, then
// ATen's multiply (in float for half types, "opmath"), rounded to T on store.

template <bool kTanh>
struct GeluOp {
  static constexpr int kMinBlocksPerSm = 4;
  static constexpr int kIn = 1;   // x
  static constexpr int kOut = 1;  // gelu(x)
  template <typename T>
  __device__ __forceinline__ void apply(const float (&in)[kIn], float (&out)[kOut]) const {
    out[0] = gelu_eager<kTanh>(in[0]);
  }
};

template <bool kTanh>
struct GegluOp {
  static constexpr int kMinBlocksPerSm = 4;
  static constexpr int kIn = 2;   // gate, up
  static constexpr int kOut = 1;  // gelu(gate) * up
  template <typename T>
  __device__ __forceinline__ void apply(const float (&in)[kIn], float (&out)[kOut]) const {
    out[0] = round_to<T>(gelu_eager<kTanh>(in[0])) * in[1];
  }
};

// Not part of the eager contract (autograd's gelu_backward + mul differ in their own
// roundings): float32 math throughout, see gelu_math.cuh.
template <bool kTanh>
struct GegluBackwardOp {
  static constexpr int kMinBlocksPerSm = 2;
  static constexpr int kIn = 3;   // grad_out, gate, up
  static constexpr int kOut = 2;  // grad_gate, grad_up
  template <typename T>
  __device__ __forceinline__ void apply(const float (&in)[kIn], float (&out)[kOut]) const {
    float value, derivative;
    gelu_and_derivative<kTanh>(in[1], value, derivative);
    out[0] = in[0] * in[2] * derivative;  // d/dgate (gelu(gate) * up)
    out[1] = in[0] * value;               // d/dup
  }
};

// ----------------------------------------------------------------------------- kernel

constexpr int kMaxThreads = 256;
// Packs per thread on the 16-byte path: up to 4 x 16 B per input, all issued before
// the first use (8 loads in flight per thread for geglu, 12 for its backward).
constexpr int kMaxPacksPerThreadVec = 4;
// The scalar fallback moves one element per access, so it keeps more in flight.
constexpr int kMaxPacksPerThreadScalar = 8;

template <typename T, int NIn, int NOut>
struct RowwiseArgs {
  const T *in[NIn];
  int64_t in_row_stride[NIn];  // elements
  T *out[NOut];
  int64_t out_row_stride[NOut];
  int64_t width;          // elements per row
  int64_t tiles_per_row;  // a tile: blockDim.x * packs_per_thread packs of one row
  int64_t num_tiles;      // rows * tiles_per_row
  int packs_per_thread;   // <= MaxPacksPerThread, chosen per launch to fit the row length
};

// One tile per block (the loop only runs again if the grid hit its cap). Thread t
// handles packs t, t + blockDim.x, ... of its tile, so every load instruction of a warp
// covers 32 consecutive packs. With N > 1 the last width % N elements of a row (its
// tail) are done one per thread by the block holding the row's last tile.
template <typename T, typename Op, int N, int MaxPacksPerThread>
__global__ void __launch_bounds__(kMaxThreads, Op::kMinBlocksPerSm)
    rowwise_kernel(const RowwiseArgs<T, Op::kIn, Op::kOut> a) {
  using P = Pack<T, N>;
  const Op op;
  const int64_t packs = a.width / N;
  const int tail = static_cast<int>(a.width - packs * N);
  const int64_t tile_packs = static_cast<int64_t>(blockDim.x) * a.packs_per_thread;

  for (int64_t tile = blockIdx.x; tile < a.num_tiles; tile += gridDim.x) {
    const int64_t row = tile / a.tiles_per_row;
    const int64_t tile_in_row = tile - row * a.tiles_per_row;
    const int64_t first = tile_in_row * tile_packs + threadIdx.x;
    // int64 throughout: row * row_stride and the index in a collapsed row pass 2^31.
    const T *in[Op::kIn];
    T *out[Op::kOut];
#pragma unroll
    for (int k = 0; k < Op::kIn; ++k) in[k] = a.in[k] + row * a.in_row_stride[k];
#pragma unroll
    for (int k = 0; k < Op::kOut; ++k) out[k] = a.out[k] + row * a.out_row_stride[k];

    // All loads first (independent, so they are in flight together), then math + stores.
    P x[Op::kIn][MaxPacksPerThread];
#pragma unroll
    for (int i = 0; i < MaxPacksPerThread; ++i) {
      const int64_t p = first + static_cast<int64_t>(i) * blockDim.x;
      if (i < a.packs_per_thread && p < packs) {
#pragma unroll
        for (int k = 0; k < Op::kIn; ++k) x[k][i] = load_pack<T, N>(in[k] + p * N);
      }
    }
#pragma unroll
    for (int i = 0; i < MaxPacksPerThread; ++i) {
      const int64_t p = first + static_cast<int64_t>(i) * blockDim.x;
      if (i < a.packs_per_thread && p < packs) {
        float f[Op::kIn][N], y[Op::kOut][N];
#pragma unroll
        for (int k = 0; k < Op::kIn; ++k) unpack_to_floats<T, N>(x[k][i], f[k]);
#pragma unroll
        for (int j = 0; j < N; ++j) {
          float v[Op::kIn], o[Op::kOut];
#pragma unroll
          for (int k = 0; k < Op::kIn; ++k) v[k] = f[k][j];
          op.template apply<T>(v, o);
#pragma unroll
          for (int k = 0; k < Op::kOut; ++k) y[k][j] = o[k];
        }
#pragma unroll
        for (int k = 0; k < Op::kOut; ++k) store_pack<T, N>(out[k] + p * N, pack_from_floats<T, N>(y[k]));
      }
    }
    if (N > 1 && tail > 0 && tile_in_row == a.tiles_per_row - 1 && static_cast<int>(threadIdx.x) < tail) {
      const int64_t e = packs * N + threadIdx.x;
      float v[Op::kIn], o[Op::kOut];
#pragma unroll
      for (int k = 0; k < Op::kIn; ++k) v[k] = to_float(in[k][e]);
      op.template apply<T>(v, o);
#pragma unroll
      for (int k = 0; k < Op::kOut; ++k) out[k][e] = from_float<T>(o[k]);
    }
  }
}

// ----------------------------------------------------------------------------- launch

struct Tiling {
  int threads;
  int packs_per_thread;
  int64_t tiles_per_row;
};

// Tiles are cut within rows, so the best size depends on the row length. Prefer, in
// order: (1) at least two blocks per SM (a decode shape like [16, 24576] is a few
// long rows); (2) tiles covering a row with at most 1/8 idle lanes (a merged
// [.., 2 * 3072] bf16 row has 384 packs per half: 128 threads x 3); (3) with enough
// blocks, the largest tile (most bytes in flight per thread), otherwise the smallest
// (the most blocks, so the most SMs, for a small problem; the least idle lanes for
// rows much shorter than any tile).
Tiling choose_tiling(int64_t rows, int64_t packs_per_row, int max_packs_per_thread, int num_sms) {
  Tiling best{};
  std::tuple<bool, bool, int64_t> best_key{false, false, INT64_MIN};
  for (int threads : {kMaxThreads, kMaxThreads / 2}) {
    for (int ppt = max_packs_per_thread; ppt >= 1; --ppt) {
      const int64_t tile = static_cast<int64_t>(threads) * ppt;
      const int64_t tiles_per_row = (packs_per_row + tile - 1) / tile;
      const bool enough_blocks = rows * tiles_per_row >= 2 * static_cast<int64_t>(num_sms);
      const bool tight = packs_per_row * 8 >= tiles_per_row * tile * 7;
      const std::tuple<bool, bool, int64_t> key{enough_blocks, tight, enough_blocks && tight ? tile : -tile};
      if (key > best_key) {
        best_key = key;
        best = {threads, ppt, tiles_per_row};
      }
    }
  }
  return best;
}

// Streaming multiprocessors of `device`, queried once per device.
int sm_count(int device) {
  static std::array<std::atomic<int>, 64> cache{};  // 0: not queried yet
  const bool cacheable = device >= 0 && device < static_cast<int>(cache.size());
  int n = cacheable ? cache[device].load(std::memory_order_relaxed) : 0;
  if (n == 0) {
    check_cuda(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
    if (cacheable) cache[device].store(n, std::memory_order_relaxed);
  }
  return n;
}

// Far beyond any real grid (2^31 - 1 is the hardware limit); past it the kernel loops.
constexpr int64_t kMaxGrid = int64_t{1} << 30;

template <typename T, typename Op, int N, int MaxPacksPerThread>
void launch_packed(int64_t rows, int64_t width, const Operand *in, const Operand *out, int device,
                   cudaStream_t stream) {
  RowwiseArgs<T, Op::kIn, Op::kOut> a{};
  for (int k = 0; k < Op::kIn; ++k) {
    a.in[k] = static_cast<const T *>(in[k].ptr);
    a.in_row_stride[k] = in[k].row_stride;
  }
  for (int k = 0; k < Op::kOut; ++k) {
    a.out[k] = static_cast<T *>(out[k].ptr);
    a.out_row_stride[k] = out[k].row_stride;
  }
  a.width = width;
  // A row shorter than one pack is all tail: it still needs one tile.
  const int64_t packs_per_row = std::max<int64_t>(width / N, 1);
  const Tiling t = choose_tiling(rows, packs_per_row, MaxPacksPerThread, sm_count(device));
  a.tiles_per_row = t.tiles_per_row;
  a.num_tiles = rows * t.tiles_per_row;
  a.packs_per_thread = t.packs_per_thread;
  const auto grid = static_cast<unsigned int>(std::min(a.num_tiles, kMaxGrid));
  rowwise_kernel<T, Op, N, MaxPacksPerThread><<<grid, t.threads, 0, stream>>>(a);
  check_cuda(cudaGetLastError(), "kernel launch");
}

template <typename T, typename Op>
void launch_typed(int64_t rows, int64_t width, const Operand *in_ptr, const Operand *out_ptr, int device,
                  cudaStream_t stream) {
  std::array<Operand, Op::kIn> in;
  std::array<Operand, Op::kOut> out;
  std::copy(in_ptr, in_ptr + Op::kIn, in.begin());
  std::copy(out_ptr, out_ptr + Op::kOut, out.begin());
  // Dense operands (row stride == width) form one long row: tiles then ignore row
  // boundaries, and widths that are not a multiple of the pack still vectorize.
  bool dense = true;
  for (const Operand &o : in) dense &= o.row_stride == width;
  for (const Operand &o : out) dense &= o.row_stride == width;
  if (rows == 1 || dense) {
    width *= rows;
    rows = 1;
    for (Operand &o : in) o.row_stride = 0;
    for (Operand &o : out) o.row_stride = 0;
  }
  // The 16-byte path needs the start of every row of every operand 16-byte aligned.
  constexpr int N = kPackElems<T>;
  auto pack_aligned = [](const Operand &o) {
    return reinterpret_cast<uintptr_t>(o.ptr) % kVecBytes == 0 && o.row_stride % N == 0;
  };
  bool aligned = width >= N;
  for (const Operand &o : in) aligned &= pack_aligned(o);
  for (const Operand &o : out) aligned &= pack_aligned(o);
  if (aligned) {
    launch_packed<T, Op, N, kMaxPacksPerThreadVec>(rows, width, in.data(), out.data(), device, stream);
  } else {
    launch_packed<T, Op, 1, kMaxPacksPerThreadScalar>(rows, width, in.data(), out.data(), device, stream);
  }
}

template <typename Op>
void launch_op(RowwiseDtype dtype, int64_t rows, int64_t width, const Operand *in, const Operand *out, int device,
               cudaStream_t stream) {
  switch (dtype) {
    case RowwiseDtype::kFloat32:
      return launch_typed<float, Op>(rows, width, in, out, device, stream);
    case RowwiseDtype::kFloat16:
      return launch_typed<__half, Op>(rows, width, in, out, device, stream);
    case RowwiseDtype::kBFloat16:
      return launch_typed<__nv_bfloat16, Op>(rows, width, in, out, device, stream);
  }
  throw std::logic_error("geglu_cuda: unknown dtype");  // the ops validate first
}

}  // namespace

void launch_rowwise(RowwiseOp op, RowwiseDtype dtype, int64_t rows, int64_t width, const Operand *in,
                    const Operand *out, int device, cudaStream_t stream) {
  if (rows == 0 || width == 0) return;
  switch (op) {
    case RowwiseOp::kGelu:
      return launch_op<GeluOp<false>>(dtype, rows, width, in, out, device, stream);
    case RowwiseOp::kGeluTanh:
      return launch_op<GeluOp<true>>(dtype, rows, width, in, out, device, stream);
    case RowwiseOp::kGeglu:
      return launch_op<GegluOp<false>>(dtype, rows, width, in, out, device, stream);
    case RowwiseOp::kGegluTanh:
      return launch_op<GegluOp<true>>(dtype, rows, width, in, out, device, stream);
    case RowwiseOp::kGegluBackward:
      return launch_op<GegluBackwardOp<false>>(dtype, rows, width, in, out, device, stream);
    case RowwiseOp::kGegluBackwardTanh:
      return launch_op<GegluBackwardOp<true>>(dtype, rows, width, in, out, device, stream);
  }
  throw std::logic_error("geglu_cuda: unknown RowwiseOp " + std::to_string(static_cast<int>(op)));
}

}  // namespace geglu_cuda
