// CPU implementation of the activation ops of common/activation_ops.h, on torch's
// stable ABI: argument checks, the [rows, width] view of each tensor, and the choice of
// instruction set. The arithmetic lives in geglu_cpu_kernels.h, compiled here for the
// baseline ISA (ATen's DEFAULT) and in geglu_cpu_avx2.cpp / geglu_cpu_avx512.cpp for
// wider vectors.

// Must precede every include: names ATen's Vectorized namespace for this file.
#define CPU_CAPABILITY DEFAULT
#include "geglu_cpu_kernels.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include <torch/csrc/stable/ops.h>

#include "common/activation_ops.h"
#include "common/device_tensors.h"
#include "common/tensor_checks.h"

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

// The level ATen's CPU capability asks for: ATEN_CPU_CAPABILITY=default|avx2|avx512,
// read as ATen reads it (the stable ABI has no at::get_cpu_capability); unset, the
// CPU's own level, as ATen picks it.
int requested_level() {
  const char *env = std::getenv("ATEN_CPU_CAPABILITY");
  if (env == nullptr || *env == '\0') return static_cast<int>(Isa::kAvx512);
  std::string v(env);
  for (char &c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (v.rfind("avx512", 0) == 0) return static_cast<int>(Isa::kAvx512);
  if (v == "avx2") return static_cast<int>(Isa::kAvx2);
  if (v == "default") return static_cast<int>(Isa::kBaseline);
  return static_cast<int>(Isa::kAvx512);  // a value ATen ignores: its own choice
}

// The widest registered kernels that ATen's CPU capability allows and the CPU can run.
// Following ATen honours ATEN_CPU_CAPABILITY (how the tests reach every variant on one
// machine); ATen takes that variable at its word, so the CPU's own level caps it:
// asking for avx512 on an AVX2-only CPU runs the AVX2 kernels, not SIGILL.
const KernelTable &kernels() {
  static const KernelTable *const chosen = [] {
    int level = std::min(requested_level(), cpu_level());
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
// Every failure raises ValueError naming the op and the argument; the checks and the
// [rows, width] rule are common/tensor_checks.h (the rules of common/tensor_checks.h).

using geglu_stable::check_input;
using geglu_stable::check_matches;
using geglu_stable::RowMatrix;
using geglu_stable::RowOverlap;
using geglu_stable::ScalarType;
using geglu_stable::Tensor;

constexpr geglu_stable::DeviceType kCpu = geglu_stable::DeviceType::CPU;

Dtype storage_dtype(const Tensor &t) {
  switch (t.scalar_type()) {
  case ScalarType::Float:
    return Dtype::kFloat32;
  case ScalarType::BFloat16:
    return Dtype::kBFloat16;
  case ScalarType::Half:
    return Dtype::kFloat16;
  default:
    throw std::logic_error("storage_dtype of an unchecked tensor");
  }
}

Gelu parse_approximate(std::string_view approximate, std::string_view op) {
  return geglu_stable::is_tanh(op, approximate) ? Gelu::kTanh : Gelu::kErf;
}

// ---------------------------------------------------------------- [rows, width] views

// Inputs are only read, so their rows may overlap; outputs' rows must not.
RowMatrix as_matrix(const Tensor &t, std::string_view op, std::string_view name, bool is_output) {
  return geglu_stable::as_row_matrix(op, name, t, is_output ? RowOverlap::kRefused : RowOverlap::kAllowed);
}

Extent extent_of(const RowMatrix &m) { return {m.rows, m.width}; }

Rows rows_of(Tensor &t, const RowMatrix &m) { return {t.mutable_data_ptr(), m.row_stride}; }
ConstRows rows_of(const Tensor &t, const RowMatrix &m) { return {t.const_data_ptr(), m.row_stride}; }

std::vector<int64_t> shape_of(const Tensor &t) {
  const auto s = t.sizes();
  return std::vector<int64_t>(s.begin(), s.end());
}

// ---------------------------------------------------------------- ops

// Merged input [..., 2d]: gate = input[..., :d], up = input[..., d:]; out [..., d].
void gelu_and_mul_impl(Tensor &out, const Tensor &input, Gelu gelu, std::string_view op) {
  geglu_stable::check_not_swapped(op, out, input);
  check_input(op, "input", input, kCpu);
  const Dtype dtype = storage_dtype(input);
  const int64_t d = geglu_stable::merged_half_width(op, "input", input);
  std::vector<int64_t> out_shape = shape_of(input);
  out_shape.back() = d;
  check_matches(op, "out", out, "input", input, out_shape, kCpu);
  geglu_stable::check_no_partial_overlap(op, out, input);
  const RowMatrix in = as_matrix(input, op, "input", /*is_output=*/false);
  const RowMatrix o = as_matrix(out, op, "out", /*is_output=*/true);
  if (out.numel() == 0) {
    return;
  }
  const Extent half{in.rows, d};
  const auto *base = static_cast<const char *>(input.const_data_ptr());
  const ConstRows gate{base, in.row_stride};
  const ConstRows up{base + half.width * static_cast<int64_t>(input.element_size()), in.row_stride};
  kernels().geglu(dtype, gelu, half, rows_of(out, o), gate, up);
}

void gelu_impl(Tensor &out, const Tensor &input, Gelu gelu, std::string_view op) {
  check_input(op, "input", input, kCpu);
  const Dtype dtype = storage_dtype(input);
  check_matches(op, "out", out, "input", input, input.sizes(), kCpu);
  geglu_stable::check_no_partial_overlap(op, out, input);
  const RowMatrix in = as_matrix(input, op, "input", /*is_output=*/false);
  const RowMatrix o = as_matrix(out, op, "out", /*is_output=*/true);
  if (out.numel() == 0) {
    return;
  }
  kernels().gelu(dtype, gelu, extent_of(in), rows_of(out, o), rows_of(input, in));
}

Tensor geglu_impl(const Tensor &gate, const Tensor &up, std::string_view approximate) {
  constexpr std::string_view op = "geglu";
  const Gelu gelu = parse_approximate(approximate, op);
  check_input(op, "gate", gate, kCpu);
  const Dtype dtype = storage_dtype(gate);
  check_matches(op, "up", up, "gate", gate, gate.sizes(), kCpu);
  const RowMatrix g = as_matrix(gate, op, "gate", /*is_output=*/false);
  const RowMatrix u = as_matrix(up, op, "up", /*is_output=*/false);
  Tensor out = geglu_stable::device::empty(gate.sizes(), gate);
  if (out.numel() > 0) {
    const RowMatrix o = as_matrix(out, op, "out", /*is_output=*/true);
    kernels().geglu(dtype, gelu, extent_of(g), rows_of(out, o), rows_of(gate, g), rows_of(up, u));
  }
  return out;
}

std::tuple<Tensor, Tensor> geglu_backward_impl(const Tensor &grad_out, const Tensor &gate, const Tensor &up,
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
  Tensor grad_gate = geglu_stable::device::empty(gate.sizes(), gate);
  Tensor grad_up = geglu_stable::device::empty(gate.sizes(), gate);
  if (gate.numel() > 0) {
    const RowMatrix o = as_matrix(grad_gate, op, "grad_gate", /*is_output=*/true);
    kernels().geglu_backward(dtype, gelu, extent_of(g), rows_of(grad_gate, o), rows_of(grad_up, o),
                             rows_of(grad_out, dy), rows_of(gate, g), rows_of(up, u));
  }
  return {grad_gate, grad_up};
}

} // namespace
} // namespace geglu_cpu

// ---------------------------------------------------------------- common/activation_ops.h

namespace geglu_stable {

void gelu_and_mul(Tensor &out, const Tensor &input) {
  geglu_cpu::gelu_and_mul_impl(out, input, geglu_cpu::Gelu::kErf, "gelu_and_mul");
}

void gelu_tanh_and_mul(Tensor &out, const Tensor &input) {
  geglu_cpu::gelu_and_mul_impl(out, input, geglu_cpu::Gelu::kTanh, "gelu_tanh_and_mul");
}

void gelu(Tensor &out, const Tensor &input) { geglu_cpu::gelu_impl(out, input, geglu_cpu::Gelu::kErf, "gelu"); }

void gelu_tanh(Tensor &out, const Tensor &input) {
  geglu_cpu::gelu_impl(out, input, geglu_cpu::Gelu::kTanh, "gelu_tanh");
}

Tensor geglu(const Tensor &gate, const Tensor &up, std::string_view approximate) {
  return geglu_cpu::geglu_impl(gate, up, approximate);
}

std::tuple<Tensor, Tensor> geglu_backward(const Tensor &grad_out, const Tensor &gate, const Tensor &up,
                                          std::string_view approximate) {
  return geglu_cpu::geglu_backward_impl(grad_out, gate, up, approximate);
}

} // namespace geglu_stable
