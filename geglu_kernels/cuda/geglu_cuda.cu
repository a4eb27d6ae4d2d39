// CUDA implementations of every op in torch_binding.h.
//
// All six ops are one elementwise pattern over [rows, width] matrices: read 1-3 inputs,
// write 1-2 outputs, each operand with its own base pointer and row stride (a merged
// [.., 2d] input is two operands, its gate and up halves). They are memory bound, so
// the kernel is about moving bytes: 16-byte loads/stores when every pointer and row
// stride allows, several independent loads in flight per thread, and enough blocks to
// keep every SM busy (decode shapes have few rows). Math runs in float32.

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <string_view>
#include <tuple>

// c10's CUDA headers rather than ATen/cuda/CUDAContext.h: the latter pulls in the
// cuBLAS/cuSPARSE/cuSOLVER headers, which a bare nvcc toolkit (CI) does not have.
#include <ATen/MemoryOverlap.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "gelu_math.cuh"
#include "torch_binding.h"
#include "vec.cuh"

namespace geglu_cuda {
namespace {

// ----------------------------------------------------------------------------- ops
// Each op maps float inputs to float outputs for one element.

template <bool kTanh>
struct GeluOp {
  static constexpr int kIn = 1;   // x
  static constexpr int kOut = 1;  // gelu(x)
  __device__ __forceinline__ void operator()(const float (&in)[kIn], float (&out)[kOut]) const {
    out[0] = gelu<kTanh>(in[0]);
  }
};

template <bool kTanh>
struct GegluOp {
  static constexpr int kIn = 2;   // gate, up
  static constexpr int kOut = 1;  // gelu(gate) * up
  __device__ __forceinline__ void operator()(const float (&in)[kIn], float (&out)[kOut]) const {
    out[0] = gelu<kTanh>(in[0]) * in[1];
  }
};

template <bool kTanh>
struct GegluBackwardOp {
  static constexpr int kIn = 3;   // grad_out, gate, up
  static constexpr int kOut = 2;  // grad_gate, grad_up
  __device__ __forceinline__ void operator()(const float (&in)[kIn], float (&out)[kOut]) const {
    float value, derivative;
    gelu_and_derivative<kTanh>(in[1], value, derivative);
    out[0] = in[0] * in[2] * derivative;  // d/dgate (gelu(gate) * up)
    out[1] = in[0] * value;               // d/dup
  }
};

// ----------------------------------------------------------------------------- kernel

constexpr int kMaxThreads = 256;
// Packs per thread of the 16-byte path: 4 x 16 B per input in flight, all issued
// before the first use (e.g. 8 x 16 B per thread for geglu, 12 for its backward).
constexpr int kMaxPacksPerThreadVec = 4;
// The fallback moves one element per access, so it keeps more of them in flight.
constexpr int kMaxPacksPerThreadScalar = 8;

template <typename T, int NIn, int NOut>
struct RowwiseArgs {
  const T *in[NIn];
  int64_t in_row_stride[NIn];  // elements
  T *out[NOut];
  int64_t out_row_stride[NOut];
  int64_t width;          // elements per row
  int64_t tiles_per_row;  // a tile is packs_per_thread * blockDim.x packs of one row
  int64_t num_tiles;      // rows * tiles_per_row
  int packs_per_thread;   // <= MaxPacksPerThread (runtime, to size tiles to the shape)
};

// One tile per block (grid-stride only when the grid would exceed its cap). Thread t
// handles packs t, t + blockDim, ... of its tile, so each load instruction of a warp
// covers 32 consecutive packs. With N > 1 the row's last width % N elements (the
// tail) are done one by one by the block holding the row's last tile.
template <typename T, typename Op, int N, int MaxPacksPerThread>
__global__ void __launch_bounds__(kMaxThreads) rowwise_kernel(const RowwiseArgs<T, Op::kIn, Op::kOut> a) {
  using P = Pack<T, N>;
  const Op op;
  const int64_t packs = a.width / N;
  const int tail = static_cast<int>(a.width - packs * N);
  const int64_t tile_packs = static_cast<int64_t>(blockDim.x) * a.packs_per_thread;

  for (int64_t tile = blockIdx.x; tile < a.num_tiles; tile += gridDim.x) {
    const int64_t row = tile / a.tiles_per_row;
    const int64_t tile_in_row = tile - row * a.tiles_per_row;
    const int64_t first = tile_in_row * tile_packs + threadIdx.x;
    // int64 offsets: rows * row_stride and the flat index both pass 2^31 on big tensors.
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
        float y[Op::kOut][N];
#pragma unroll
        for (int j = 0; j < N; ++j) {
          float v[Op::kIn], o[Op::kOut];
#pragma unroll
          for (int k = 0; k < Op::kIn; ++k) v[k] = to_float(x[k][i].v[j]);
          op(v, o);
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
      op(v, o);
#pragma unroll
      for (int k = 0; k < Op::kOut; ++k) out[k][e] = from_float<T>(o[k]);
    }
  }
}

// ----------------------------------------------------------------------------- launch

// One operand of the elementwise pattern: a [rows, width] matrix with unit stride along
// width. The row count and width are shared by all operands of a launch.
struct Operand {
  void *ptr;
  int64_t row_stride;  // elements
};

struct Tiling {
  int threads;
  int packs_per_thread;
  int64_t tiles_per_row;
};

// Tiles are cut within rows, so the best size depends on the row length: prefer, in
// order, (1) at least two blocks per SM (decode shapes: [16, 24576] is a few large
// rows), (2) tiles that cover a row with at most 1/8 idle lanes (a merged [.., 2*3072]
// row is 384 packs: 128 threads x 3), (3) the largest tile (most bytes in flight).
Tiling choose_tiling(int64_t rows, int64_t packs_per_row, int max_packs_per_thread, int num_sms) {
  Tiling best{};
  std::tuple<bool, bool, int64_t> best_key{false, false, INT64_MIN};
  for (int threads : {kMaxThreads, kMaxThreads / 2}) {
    for (int ppt = max_packs_per_thread; ppt >= 1; --ppt) {
      const int64_t tile = static_cast<int64_t>(threads) * ppt;
      const int64_t tiles_per_row = (packs_per_row + tile - 1) / tile;
      const bool enough_blocks = rows * tiles_per_row >= 2 * static_cast<int64_t>(num_sms);
      const bool tight = packs_per_row * 8 >= tiles_per_row * tile * 7;
      // Among loose tilings (rows far shorter than any tile), waste the least.
      const std::tuple<bool, bool, int64_t> key{enough_blocks, tight, tight ? tile : -tile};
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
  const bool cached = device >= 0 && device < static_cast<int>(cache.size());
  int n = cached ? cache[device].load(std::memory_order_relaxed) : 0;
  if (n == 0) {
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
    if (cached) cache[device].store(n, std::memory_order_relaxed);
  }
  return n;
}

// Far beyond any real grid (2^31 - 1 is the hardware limit); the kernel grid-strides.
constexpr int64_t kMaxGrid = int64_t{1} << 30;

template <typename T, typename Op, int N, int MaxPacksPerThread>
void launch_packed(int64_t rows, int64_t width, const std::array<Operand, Op::kIn> &in,
                   const std::array<Operand, Op::kOut> &out) {
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
  const int num_sms = sm_count(c10::cuda::current_device());
  const Tiling t = choose_tiling(rows, packs_per_row, MaxPacksPerThread, num_sms);
  a.tiles_per_row = t.tiles_per_row;
  a.num_tiles = rows * t.tiles_per_row;
  a.packs_per_thread = t.packs_per_thread;
  const auto grid = static_cast<unsigned int>(std::min(a.num_tiles, kMaxGrid));
  rowwise_kernel<T, Op, N, MaxPacksPerThread><<<grid, t.threads, 0, c10::cuda::getCurrentCUDAStream()>>>(a);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename T, typename Op>
void launch_typed(int64_t rows, int64_t width, std::array<Operand, Op::kIn> in, std::array<Operand, Op::kOut> out) {
  // Dense operands (row stride == width) make one long row: the tiles then ignore
  // row boundaries, and widths that are not a multiple of the pack still vectorize.
  bool dense = true;
  for (const Operand &o : in) dense &= o.row_stride == width;
  for (const Operand &o : out) dense &= o.row_stride == width;
  if (rows == 1 || dense) {
    width *= rows;
    rows = 1;
    for (Operand &o : in) o.row_stride = 0;
    for (Operand &o : out) o.row_stride = 0;
  }
  // The 16-byte path needs every row start of every operand 16-byte aligned.
  constexpr int N = kPackElems<T>;
  bool aligned = width >= N;
  auto pack_aligned = [&](const Operand &o) {
    return reinterpret_cast<uintptr_t>(o.ptr) % kVecBytes == 0 && o.row_stride % N == 0;
  };
  for (const Operand &o : in) aligned &= pack_aligned(o);
  for (const Operand &o : out) aligned &= pack_aligned(o);
  if (aligned) {
    launch_packed<T, Op, N, kMaxPacksPerThreadVec>(rows, width, in, out);
  } else {
    launch_packed<T, Op, 1, kMaxPacksPerThreadScalar>(rows, width, in, out);
  }
}

template <typename Op>
void launch_rowwise(at::ScalarType dtype, int64_t rows, int64_t width, const std::array<Operand, Op::kIn> &in,
                    const std::array<Operand, Op::kOut> &out) {
  if (rows == 0 || width == 0) return;
  switch (dtype) {
    case at::ScalarType::Float:
      return launch_typed<float, Op>(rows, width, in, out);
    case at::ScalarType::Half:
      return launch_typed<__half, Op>(rows, width, in, out);
    case at::ScalarType::BFloat16:
      return launch_typed<__nv_bfloat16, Op>(rows, width, in, out);
    default:
      TORCH_CHECK(false, "geglu_cuda: unexpected dtype ", dtype);  // validated before
  }
}

// ----------------------------------------------------------------------------- validation
// Messages name the op and the argument; ValueError, like the package's Python checks.

void check_input(const char *op, const char *name, const at::Tensor &t) {
  TORCH_CHECK_VALUE(t.is_cuda(), op, ": ", name, " must be a CUDA tensor, got device ", t.device());
  const auto s = t.scalar_type();
  TORCH_CHECK_VALUE(s == at::kFloat || s == at::kHalf || s == at::kBFloat16, op, ": ", name,
                    " must have dtype float32/float16/bfloat16, got ", s);
}

// `t` is on the device of, and has the dtype of, the op's first tensor `ref`.
void check_like(const char *op, const char *name, const at::Tensor &t, const char *ref_name, const at::Tensor &ref) {
  TORCH_CHECK_VALUE(t.device() == ref.device(), op, ": ", name, " must be on the device of ", ref_name, " (",
                    ref.device(), "), got ", t.device());
  TORCH_CHECK_VALUE(t.scalar_type() == ref.scalar_type(), op, ": ", name, " must have the dtype of ", ref_name, " (",
                    ref.scalar_type(), "), got ", t.scalar_type());
}

void check_shape(const char *op, const char *name, const at::Tensor &t, at::IntArrayRef shape) {
  TORCH_CHECK_VALUE(t.sizes() == shape, op, ": ", name, " must have shape ", shape, ", got ", t.sizes());
}

// A tensor as a [rows, width] matrix without copying: stride 1 along the last
// dimension, leading dimensions that collapse to one row stride, rows that do not
// overlap. Size-1 dimensions impose nothing.
struct RowMatrix {
  int64_t rows;
  int64_t width;
  int64_t row_stride;
};

RowMatrix as_row_matrix(const char *op, const char *name, const at::Tensor &t) {
  const int64_t dim = t.dim();
  const int64_t width = dim == 0 ? 1 : t.size(-1);
  TORCH_CHECK_VALUE(dim == 0 || width <= 1 || t.stride(-1) == 1, op, ": ", name,
                    " must have stride 1 in its last dimension, got strides ", t.strides(), " for shape ", t.sizes(),
                    " (call .contiguous() first)");
  int64_t rows = 1;
  int64_t row_stride = -1;
  for (int64_t d = dim - 2; d >= 0; --d) {
    if (t.size(d) == 1) continue;
    if (row_stride < 0) {
      row_stride = t.stride(d);
    } else {
      TORCH_CHECK_VALUE(t.stride(d) == row_stride * rows, op, ": ", name,
                        " must be a row-strided matrix: its leading dimensions must collapse to one row stride, got "
                        "strides ",
                        t.strides(), " for shape ", t.sizes(), " (call .contiguous() first)");
    }
    rows *= t.size(d);
  }
  if (row_stride < 0) row_stride = width;  // a single row
  TORCH_CHECK_VALUE(rows <= 1 || width == 0 || row_stride >= width, op, ": ", name,
                    " must have non-overlapping rows (row stride >= last dimension), got strides ", t.strides(),
                    " for shape ", t.sizes());
  return {rows, width, row_stride};
}

bool is_tanh(const char *op, std::string_view approximate) {
  if (approximate == "tanh") return true;
  TORCH_CHECK_VALUE(approximate == "none", op, ": approximate must be 'tanh' or 'none', got '", approximate, "'");
  return false;
}

// ----------------------------------------------------------------------------- entry points

template <bool kTanh>
void gelu_out(const char *op, at::Tensor &out, const at::Tensor &input) {
  check_input(op, "input", input);
  TORCH_CHECK_VALUE(out.is_cuda(), op, ": out must be a CUDA tensor, got device ", out.device());
  check_like(op, "out", out, "input", input);
  check_shape(op, "out", out, input.sizes());
  if (input.numel() == 0) return;
  const RowMatrix x = as_row_matrix(op, "input", input);
  const RowMatrix y = as_row_matrix(op, "out", out);
  at::assert_no_partial_overlap(out, input);  // out == input (in place) is fine
  const c10::cuda::CUDAGuard guard(input.device());
  launch_rowwise<GeluOp<kTanh>>(input.scalar_type(), x.rows, x.width, {Operand{input.data_ptr(), x.row_stride}},
                                {Operand{out.data_ptr(), y.row_stride}});
}

// input [.., 2d]: gate = input[.., :d], up = input[.., d:]; out [.., d].
template <bool kTanh>
void gelu_and_mul_out(const char *op, at::Tensor &out, const at::Tensor &input) {
  check_input(op, "input", input);
  TORCH_CHECK_VALUE(input.dim() >= 1, op, ": input must have at least one dimension ([..., 2d]), got a 0-d tensor");
  TORCH_CHECK_VALUE(out.is_cuda(), op, ": out must be a CUDA tensor, got device ", out.device());
  check_like(op, "out", out, "input", input);
  const int64_t two_d = input.size(-1);
  TORCH_CHECK_VALUE(two_d % 2 == 0, op,
                    ": input must have an even last dimension (gate and up halves, [..., 2d]), got ", two_d);
  const int64_t d = two_d / 2;
  std::vector<int64_t> out_shape = input.sizes().vec();
  out_shape.back() = d;
  check_shape(op, "out", out, out_shape);
  if (out.numel() == 0) return;
  const RowMatrix x = as_row_matrix(op, "input", input);
  const RowMatrix y = as_row_matrix(op, "out", out);
  at::assert_no_overlap(out, input);
  const c10::cuda::CUDAGuard guard(input.device());
  char *gate = static_cast<char *>(input.data_ptr());
  char *up = gate + d * static_cast<int64_t>(input.element_size());
  launch_rowwise<GegluOp<kTanh>>(input.scalar_type(), x.rows, d,
                                 {Operand{gate, x.row_stride}, Operand{up, x.row_stride}},
                                 {Operand{out.data_ptr(), y.row_stride}});
}

template <bool kTanh>
at::Tensor geglu_new(const char *op, const at::Tensor &gate, const at::Tensor &up) {
  check_input(op, "gate", gate);
  check_input(op, "up", up);
  check_like(op, "up", up, "gate", gate);
  check_shape(op, "up", up, gate.sizes());
  const c10::cuda::CUDAGuard guard(gate.device());
  at::Tensor out = at::empty(gate.sizes(), gate.options().memory_format(at::MemoryFormat::Contiguous));
  if (out.numel() == 0) return out;
  const RowMatrix g = as_row_matrix(op, "gate", gate);
  const RowMatrix u = as_row_matrix(op, "up", up);
  launch_rowwise<GegluOp<kTanh>>(gate.scalar_type(), g.rows, g.width,
                                 {Operand{gate.data_ptr(), g.row_stride}, Operand{up.data_ptr(), u.row_stride}},
                                 {Operand{out.data_ptr(), g.width}});
  return out;
}

template <bool kTanh>
std::tuple<at::Tensor, at::Tensor> geglu_backward_new(const char *op, const at::Tensor &grad_out,
                                                      const at::Tensor &gate, const at::Tensor &up) {
  check_input(op, "grad_out", grad_out);
  check_input(op, "gate", gate);
  check_input(op, "up", up);
  check_like(op, "gate", gate, "grad_out", grad_out);
  check_like(op, "up", up, "grad_out", grad_out);
  check_shape(op, "gate", gate, grad_out.sizes());
  check_shape(op, "up", up, grad_out.sizes());
  const c10::cuda::CUDAGuard guard(grad_out.device());
  const auto options = gate.options().memory_format(at::MemoryFormat::Contiguous);
  at::Tensor grad_gate = at::empty(gate.sizes(), options);
  at::Tensor grad_up = at::empty(gate.sizes(), options);
  if (gate.numel() == 0) return {grad_gate, grad_up};
  const RowMatrix go = as_row_matrix(op, "grad_out", grad_out);
  const RowMatrix g = as_row_matrix(op, "gate", gate);
  const RowMatrix u = as_row_matrix(op, "up", up);
  launch_rowwise<GegluBackwardOp<kTanh>>(
      gate.scalar_type(), g.rows, g.width,
      {Operand{grad_out.data_ptr(), go.row_stride}, Operand{gate.data_ptr(), g.row_stride},
       Operand{up.data_ptr(), u.row_stride}},
      {Operand{grad_gate.data_ptr(), g.width}, Operand{grad_up.data_ptr(), g.width}});
  return {grad_gate, grad_up};
}

}  // namespace
}  // namespace geglu_cuda

// ----------------------------------------------------------------------------- binding

void gelu_and_mul(torch::Tensor &out, torch::Tensor const &input) {
  geglu_cuda::gelu_and_mul_out<false>("gelu_and_mul", out, input);
}

void gelu_tanh_and_mul(torch::Tensor &out, torch::Tensor const &input) {
  geglu_cuda::gelu_and_mul_out<true>("gelu_tanh_and_mul", out, input);
}

void gelu(torch::Tensor &out, torch::Tensor const &input) { geglu_cuda::gelu_out<false>("gelu", out, input); }

void gelu_tanh(torch::Tensor &out, torch::Tensor const &input) {
  geglu_cuda::gelu_out<true>("gelu_tanh", out, input);
}

torch::Tensor geglu(torch::Tensor const &gate, torch::Tensor const &up, std::string_view approximate) {
  return geglu_cuda::is_tanh("geglu", approximate) ? geglu_cuda::geglu_new<true>("geglu", gate, up)
                                                   : geglu_cuda::geglu_new<false>("geglu", gate, up);
}

std::tuple<torch::Tensor, torch::Tensor> geglu_backward(torch::Tensor const &grad_out, torch::Tensor const &gate,
                                                        torch::Tensor const &up, std::string_view approximate) {
  return geglu_cuda::is_tanh("geglu_backward", approximate)
             ? geglu_cuda::geglu_backward_new<true>("geglu_backward", grad_out, gate, up)
             : geglu_cuda::geglu_backward_new<false>("geglu_backward", grad_out, gate, up);
}
