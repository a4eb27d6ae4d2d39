// CPU implementation of the ops in torch_binding.h: argument checks, the
// [rows, width] view of each tensor, and the choice of instruction set. The arithmetic
// lives in geglu_cpu_kernels.h, compiled here for the baseline ISA (ATen's DEFAULT)
// and in geglu_cpu_avx2.cpp / geglu_cpu_avx512.cpp for wider vectors.

// Must precede every include: names ATen's Vectorized namespace for this file.
#define CPU_CAPABILITY DEFAULT
#include "geglu_cpu_kernels.h"

#include <algorithm>
#include <array>
#include <string>
#include <string_view>
#include <tuple>

#include <ATen/MemoryOverlap.h>
#include <ATen/Version.h>
#include <torch/torch.h>

#include "torch_binding.h"

namespace geglu_cpu {

// ---------------------------------------------------------------- instruction set

namespace {
std::array<const KernelTable *, kIsaCount> &registered_tables() {
  static std::array<const KernelTable *, kIsaCount> tables{}; // constant-initialized
  return tables;
}
} // namespace

void register_kernels(Isa isa, const KernelTable *table) {
  registered_tables()[static_cast<int>(isa)] = table;
}

namespace {

// The widest instruction set this CPU and its OS can run (AVX-512 F/BW/VL/DQ and AVX2
// + FMA + F16C are what the two wide files are compiled for). libgcc's probe also
// checks that the OS saves the vector registers (XCR0).
int cpu_level() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    return static_cast<int>(Isa::kAvx512);
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    return static_cast<int>(Isa::kAvx2);
  }
  return static_cast<int>(Isa::kBaseline);
}

// The widest registered kernels that ATen's CPU capability allows and the CPU can run.
// Following ATen honours ATEN_CPU_CAPABILITY=default|avx2|... (how the tests reach every
// variant on one machine); ATen takes that variable at its word, so the CPU's own
// level caps it: asking for avx512 on an AVX2-only CPU runs the AVX2 kernels, not SIGILL.
const KernelTable &kernels() {
  static const KernelTable *const chosen = [] {
    const std::string capability = at::get_cpu_capability();
    int level = capability == "AVX512" ? static_cast<int>(Isa::kAvx512)
                : capability == "AVX2" ? static_cast<int>(Isa::kAvx2)
                                       : static_cast<int>(Isa::kBaseline);
    level = std::min(level, cpu_level());
    for (; level > 0; --level) {
      if (const KernelTable *table = registered_tables()[level]) {
        return table;
      }
    }
    return &kKernelTable; // this file's baseline build
  }();
  return *chosen;
}

// ---------------------------------------------------------------- argument checks
// Every failure raises ValueError (TORCH_CHECK_VALUE) naming the op and the argument.

std::string dtype_name(at::ScalarType t) {
  switch (t) {
  case at::kFloat:
    return "torch.float32";
  case at::kBFloat16:
    return "torch.bfloat16";
  case at::kHalf:
    return "torch.float16";
  case at::kDouble:
    return "torch.float64";
  default:
    return std::string("torch.") + c10::toString(t);
  }
}

void check_cpu_tensor(const at::Tensor &t, std::string_view op, std::string_view name) {
  TORCH_CHECK_VALUE(t.defined(), op, ": `", name, "` is an undefined tensor");
  TORCH_CHECK_VALUE(t.device().is_cpu(), op, ": `", name,
                    "` must be a CPU tensor for this (CPU) kernel, got device ", t.device());
  TORCH_CHECK_VALUE(t.layout() == at::kStrided, op, ": `", name,
                    "` must be a dense (strided) tensor, got layout ", t.layout());
}

Dtype storage_dtype(const at::Tensor &t, std::string_view op, std::string_view name) {
  switch (t.scalar_type()) {
  case at::kFloat:
    return Dtype::kFloat32;
  case at::kBFloat16:
    return Dtype::kBFloat16;
  case at::kHalf:
    return Dtype::kFloat16;
  default:
    TORCH_CHECK_VALUE(false, op, ": `", name, "` has unsupported dtype ",
                      dtype_name(t.scalar_type()),
                      "; supported dtypes are torch.float32, torch.bfloat16 and torch.float16");
  }
}

// `t` must be like `ref` (dtype, device) with exactly the given shape.
void check_matches(const at::Tensor &t, std::string_view name, const at::Tensor &ref,
                   std::string_view ref_name, at::IntArrayRef shape, std::string_view op) {
  check_cpu_tensor(t, op, name);
  TORCH_CHECK_VALUE(t.scalar_type() == ref.scalar_type(), op, ": `", name, "` has dtype ",
                    dtype_name(t.scalar_type()), " but `", ref_name, "` has dtype ",
                    dtype_name(ref.scalar_type()), "; they must match");
  TORCH_CHECK_VALUE(t.sizes() == shape, op, ": `", name, "` has shape ", t.sizes(),
                    ", expected ", shape, " (from `", ref_name, "` of shape ", ref.sizes(), ")");
}

// `out` may be `input` itself (in place, element by element), but not a different
// view that shares some of its memory: those elements would be read after written.
void check_no_partial_overlap(const at::Tensor &out, const at::Tensor &input,
                              std::string_view op) {
  TORCH_CHECK_VALUE(at::get_overlap_status(out, input) != at::MemOverlapStatus::Partial, op,
                    ": `out` partially overlaps `input` in memory; pass a separate tensor",
                    " (or, where shapes allow, `input` itself to compute in place)");
}

Gelu parse_approximate(std::string_view approximate, std::string_view op) {
  if (approximate == "none") {
    return Gelu::kErf;
  }
  if (approximate == "tanh") {
    return Gelu::kTanh;
  }
  TORCH_CHECK_VALUE(false, op, ": `approximate` must be 'tanh' or 'none', got '", approximate,
                    "'");
}

// ---------------------------------------------------------------- [rows, width] views

struct Matrix {
  Extent extent;
  int64_t row_stride;
};

// Views `t` as a [rows, width] matrix without copying: the last dimension must have
// stride 1 and the leading dimensions must collapse into one row stride (any
// contiguous tensor, or a column slice x[..., a:b] of one). A 0-d tensor is 1 x 1.
// Outputs must not have overlapping rows.
Matrix as_matrix(const at::Tensor &t, std::string_view op, std::string_view name,
                 bool is_output) {
  if (t.dim() == 0) {
    return {{1, 1}, 1};
  }
  const int64_t width = t.size(-1);
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < t.dim(); ++d) {
    rows *= t.size(d);
  }
  if (rows == 0 || width == 0) {
    return {{rows, width}, width};
  }
  TORCH_CHECK_VALUE(width == 1 || t.stride(-1) == 1, op, ": `", name,
                    "` must have stride 1 in its last dimension, got sizes ", t.sizes(),
                    " and strides ", t.strides(), "; call .contiguous() first");
  // Walk the leading dimensions from the innermost out; size-1 dimensions do not
  // move, so their stride does not matter.
  int64_t row_stride = width;
  int64_t inner_stride = -1;
  int64_t inner_size = 0;
  for (int64_t d = t.dim() - 2; d >= 0; --d) {
    if (t.size(d) == 1) {
      continue;
    }
    if (inner_stride < 0) {
      row_stride = t.stride(d);
    } else {
      TORCH_CHECK_VALUE(t.stride(d) == inner_stride * inner_size, op, ": `", name,
                        "` must be viewable as [rows, width] with a single row stride, got "
                        "sizes ",
                        t.sizes(), " and strides ", t.strides(), "; call .contiguous() first");
    }
    inner_stride = t.stride(d);
    inner_size = t.size(d);
  }
  if (is_output) {
    TORCH_CHECK_VALUE(rows == 1 || row_stride >= width, op, ": `", name,
                      "` has overlapping rows (row stride ", row_stride, " < width ", width,
                      "), so it cannot be written");
  }
  return {{rows, width}, row_stride};
}

Rows rows_of(at::Tensor &t, const Matrix &m) { return {t.mutable_data_ptr(), m.row_stride}; }
ConstRows rows_of(const at::Tensor &t, const Matrix &m) {
  return {t.const_data_ptr(), m.row_stride};
}

// ---------------------------------------------------------------- ops

// Merged input [..., 2d]: gate = input[..., :d], up = input[..., d:]; out [..., d].
void gelu_and_mul_impl(at::Tensor &out, const at::Tensor &input, Gelu gelu,
                       std::string_view op) {
  check_cpu_tensor(input, op, "input");
  const Dtype dtype = storage_dtype(input, op, "input");
  TORCH_CHECK_VALUE(input.dim() >= 1, op, ": `input` must have at least one dimension");
  const int64_t merged = input.size(-1);
  TORCH_CHECK_VALUE(merged % 2 == 0, op,
                    ": `input`'s last dimension must be even (gate and up halves), got ",
                    merged);
  std::vector<int64_t> out_shape = input.sizes().vec();
  out_shape.back() = merged / 2;
  check_matches(out, "out", input, "input", out_shape, op);
  check_no_partial_overlap(out, input, op);
  const Matrix in = as_matrix(input, op, "input", /*is_output=*/false);
  const Matrix o = as_matrix(out, op, "out", /*is_output=*/true);
  if (out.numel() == 0) {
    return;
  }
  const Extent half{in.extent.rows, merged / 2};
  const auto *base = static_cast<const char *>(input.const_data_ptr());
  const ConstRows gate{base, in.row_stride};
  const ConstRows up{base + half.width * static_cast<int64_t>(input.element_size()),
                     in.row_stride};
  kernels().geglu(dtype, gelu, half, rows_of(out, o), gate, up);
}

void gelu_impl(at::Tensor &out, const at::Tensor &input, Gelu gelu, std::string_view op) {
  check_cpu_tensor(input, op, "input");
  const Dtype dtype = storage_dtype(input, op, "input");
  check_matches(out, "out", input, "input", input.sizes(), op);
  check_no_partial_overlap(out, input, op);
  const Matrix in = as_matrix(input, op, "input", /*is_output=*/false);
  const Matrix o = as_matrix(out, op, "out", /*is_output=*/true);
  if (out.numel() == 0) {
    return;
  }
  kernels().gelu(dtype, gelu, in.extent, rows_of(out, o), rows_of(input, in));
}

at::Tensor geglu_impl(const at::Tensor &gate, const at::Tensor &up, std::string_view approximate) {
  constexpr std::string_view op = "geglu";
  const Gelu gelu = parse_approximate(approximate, op);
  check_cpu_tensor(gate, op, "gate");
  const Dtype dtype = storage_dtype(gate, op, "gate");
  check_matches(up, "up", gate, "gate", gate.sizes(), op);
  const Matrix g = as_matrix(gate, op, "gate", /*is_output=*/false);
  const Matrix u = as_matrix(up, op, "up", /*is_output=*/false);
  at::Tensor out = at::empty(gate.sizes(), gate.options());
  if (out.numel() > 0) {
    const Matrix o = as_matrix(out, op, "out", /*is_output=*/true);
    kernels().geglu(dtype, gelu, g.extent, rows_of(out, o), rows_of(gate, g), rows_of(up, u));
  }
  return out;
}

std::tuple<at::Tensor, at::Tensor> geglu_backward_impl(const at::Tensor &grad_out,
                                                       const at::Tensor &gate,
                                                       const at::Tensor &up,
                                                       std::string_view approximate) {
  constexpr std::string_view op = "geglu_backward";
  const Gelu gelu = parse_approximate(approximate, op);
  check_cpu_tensor(gate, op, "gate");
  const Dtype dtype = storage_dtype(gate, op, "gate");
  check_matches(up, "up", gate, "gate", gate.sizes(), op);
  check_matches(grad_out, "grad_out", gate, "gate", gate.sizes(), op);
  const Matrix dy = as_matrix(grad_out, op, "grad_out", /*is_output=*/false);
  const Matrix g = as_matrix(gate, op, "gate", /*is_output=*/false);
  const Matrix u = as_matrix(up, op, "up", /*is_output=*/false);
  at::Tensor grad_gate = at::empty(gate.sizes(), gate.options());
  at::Tensor grad_up = at::empty(gate.sizes(), gate.options());
  if (gate.numel() > 0) {
    const Matrix o = as_matrix(grad_gate, op, "grad_gate", /*is_output=*/true);
    kernels().geglu_backward(dtype, gelu, g.extent, rows_of(grad_gate, o),
                             rows_of(grad_up, o), rows_of(grad_out, dy), rows_of(gate, g),
                             rows_of(up, u));
  }
  return {grad_gate, grad_up};
}

} // namespace
} // namespace geglu_cpu

// ---------------------------------------------------------------- torch_binding.h

void gelu_and_mul(torch::Tensor &out, torch::Tensor const &input) {
  geglu_cpu::gelu_and_mul_impl(out, input, geglu_cpu::Gelu::kErf, "gelu_and_mul");
}

void gelu_tanh_and_mul(torch::Tensor &out, torch::Tensor const &input) {
  geglu_cpu::gelu_and_mul_impl(out, input, geglu_cpu::Gelu::kTanh, "gelu_tanh_and_mul");
}

void gelu(torch::Tensor &out, torch::Tensor const &input) {
  geglu_cpu::gelu_impl(out, input, geglu_cpu::Gelu::kErf, "gelu");
}

void gelu_tanh(torch::Tensor &out, torch::Tensor const &input) {
  geglu_cpu::gelu_impl(out, input, geglu_cpu::Gelu::kTanh, "gelu_tanh");
}


torch::Tensor geglu(torch::Tensor const &gate, torch::Tensor const &up,
                    std::string_view approximate) {
  return geglu_cpu::geglu_impl(gate, up, approximate);
}

std::tuple<torch::Tensor, torch::Tensor>
geglu_backward(torch::Tensor const &grad_out, torch::Tensor const &gate,
               torch::Tensor const &up, std::string_view approximate) {
  return geglu_cpu::geglu_backward_impl(grad_out, gate, up, approximate);
}
