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

#include "common/tensor_checks.h"
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
// Every failure raises ValueError (TORCH_CHECK_VALUE) naming the op and the argument;
// the checks and the [rows, width] rule are common/tensor_checks.h, shared with the
// CUDA backend.

using geglu_checks::check_input;
using geglu_checks::check_matches;
using geglu_checks::RowMatrix;
using geglu_checks::RowOverlap;

constexpr c10::DeviceType kCpu = c10::DeviceType::CPU;

Dtype storage_dtype(const at::Tensor &t) {
  switch (t.scalar_type()) {
  case at::kFloat:
    return Dtype::kFloat32;
  case at::kBFloat16:
    return Dtype::kBFloat16;
  case at::kHalf:
    return Dtype::kFloat16;
  default:
    TORCH_INTERNAL_ASSERT(false, "storage_dtype of an unchecked tensor: ", t.scalar_type());
  }
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
  return geglu_checks::is_tanh(op, approximate) ? Gelu::kTanh : Gelu::kErf;
}

// ---------------------------------------------------------------- [rows, width] views

// Inputs are only read, so their rows may overlap; outputs' rows must not.
RowMatrix as_matrix(const at::Tensor &t, std::string_view op, std::string_view name,
                    bool is_output) {
  return geglu_checks::as_row_matrix(op, name, t,
                                     is_output ? RowOverlap::kRefused : RowOverlap::kAllowed);
}

Extent extent_of(const RowMatrix &m) { return {m.rows, m.width}; }

Rows rows_of(at::Tensor &t, const RowMatrix &m) { return {t.mutable_data_ptr(), m.row_stride}; }
ConstRows rows_of(const at::Tensor &t, const RowMatrix &m) {
  return {t.const_data_ptr(), m.row_stride};
}

// ---------------------------------------------------------------- ops

// Merged input [..., 2d]: gate = input[..., :d], up = input[..., d:]; out [..., d].
void gelu_and_mul_impl(at::Tensor &out, const at::Tensor &input, Gelu gelu,
                       std::string_view op) {
  check_input(op, "input", input, kCpu);
  const Dtype dtype = storage_dtype(input);
  const int64_t d = geglu_checks::merged_half_width(op, "input", input);
  std::vector<int64_t> out_shape = input.sizes().vec();
  out_shape.back() = d;
  check_matches(op, "out", out, "input", input, out_shape, kCpu);
  check_no_partial_overlap(out, input, op);
  const RowMatrix in = as_matrix(input, op, "input", /*is_output=*/false);
  const RowMatrix o = as_matrix(out, op, "out", /*is_output=*/true);
  if (out.numel() == 0) {
    return;
  }
  const Extent half{in.rows, d};
  const auto *base = static_cast<const char *>(input.const_data_ptr());
  const ConstRows gate{base, in.row_stride};
  const ConstRows up{base + half.width * static_cast<int64_t>(input.element_size()),
                     in.row_stride};
  kernels().geglu(dtype, gelu, half, rows_of(out, o), gate, up);
}

void gelu_impl(at::Tensor &out, const at::Tensor &input, Gelu gelu, std::string_view op) {
  check_input(op, "input", input, kCpu);
  const Dtype dtype = storage_dtype(input);
  check_matches(op, "out", out, "input", input, input.sizes(), kCpu);
  check_no_partial_overlap(out, input, op);
  const RowMatrix in = as_matrix(input, op, "input", /*is_output=*/false);
  const RowMatrix o = as_matrix(out, op, "out", /*is_output=*/true);
  if (out.numel() == 0) {
    return;
  }
  kernels().gelu(dtype, gelu, extent_of(in), rows_of(out, o), rows_of(input, in));
}

at::Tensor geglu_impl(const at::Tensor &gate, const at::Tensor &up, std::string_view approximate) {
  constexpr std::string_view op = "geglu";
  const Gelu gelu = parse_approximate(approximate, op);
  check_input(op, "gate", gate, kCpu);
  const Dtype dtype = storage_dtype(gate);
  check_matches(op, "up", up, "gate", gate, gate.sizes(), kCpu);
  const RowMatrix g = as_matrix(gate, op, "gate", /*is_output=*/false);
  const RowMatrix u = as_matrix(up, op, "up", /*is_output=*/false);
  at::Tensor out = at::empty(gate.sizes(), gate.options());
  if (out.numel() > 0) {
    const RowMatrix o = as_matrix(out, op, "out", /*is_output=*/true);
    kernels().geglu(dtype, gelu, extent_of(g), rows_of(out, o), rows_of(gate, g), rows_of(up, u));
  }
  return out;
}

std::tuple<at::Tensor, at::Tensor> geglu_backward_impl(const at::Tensor &grad_out,
                                                       const at::Tensor &gate,
                                                       const at::Tensor &up,
                                                       std::string_view approximate) {
  constexpr std::string_view op = "geglu_backward";
  const Gelu gelu = parse_approximate(approximate, op);
  check_input(op, "gate", gate, kCpu);
  const Dtype dtype = storage_dtype(gate);
  check_matches(op, "up", up, "gate", gate, gate.sizes(), kCpu);
  check_matches(op, "grad_out", grad_out, "gate", gate, gate.sizes(), kCpu);
  const RowMatrix dy = as_matrix(grad_out, op, "grad_out", /*is_output=*/false);
  const RowMatrix g = as_matrix(gate, op, "gate", /*is_output=*/false);
  const RowMatrix u = as_matrix(up, op, "up", /*is_output=*/false);
  at::Tensor grad_gate = at::empty(gate.sizes(), gate.options());
  at::Tensor grad_up = at::empty(gate.sizes(), gate.options());
  if (gate.numel() > 0) {
    const RowMatrix o = as_matrix(grad_gate, op, "grad_gate", /*is_output=*/true);
    kernels().geglu_backward(dtype, gelu, extent_of(g), rows_of(grad_gate, o),
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
