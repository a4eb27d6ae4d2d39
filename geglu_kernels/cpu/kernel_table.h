#pragma once

// The interface between the op entry points (geglu_cpu.cpp) and the row kernels
// (geglu_cpu_kernels.h), which are compiled once per instruction set: baseline in
// geglu_cpu.cpp, AVX2 and AVX-512 in geglu_cpu_avx2.cpp / geglu_cpu_avx512.cpp.
// Only plain types cross this boundary, so nothing here depends on the ISA.

#include <cstdint>

namespace geglu_cpu {

enum class Dtype { kFloat32, kBFloat16, kFloat16 };

// approximate="none" is the exact (erf) GELU, approximate="tanh" the tanh form.
enum class Gelu { kErf, kTanh };

// A [rows, width] matrix: element (r, c) is at data[r * row_stride + c] (in elements).
// All offsets are int64, so tensors past 2^31 elements index correctly.
struct Rows {
  void *data;
  int64_t row_stride;
};
struct ConstRows {
  const void *data;
  int64_t row_stride;
};

struct Extent {
  int64_t rows;
  int64_t width;
};

struct KernelTable {
  const char *isa;
  // out = gelu(gate) * up
  void (*geglu)(Dtype, Gelu, Extent, Rows out, ConstRows gate, ConstRows up);
  // out = gelu(input)
  void (*gelu)(Dtype, Gelu, Extent, Rows out, ConstRows input);
  // grad_gate = grad_out * up * gelu'(gate);  grad_up = grad_out * gelu(gate)
  void (*geglu_backward)(Dtype, Gelu, Extent, Rows grad_gate, Rows grad_up,
                         ConstRows grad_out, ConstRows gate, ConstRows up);
};

// The instruction sets, in the order of ATen's CPU capability levels.
enum class Isa { kBaseline = 0, kAvx2 = 1, kAvx512 = 2 };
constexpr int kIsaCount = 3;

// Each ISA-specific file registers its table at load time (see geglu_cpu_avx2.cpp).
// A file missing from the build leaves its slot empty and the next lower ISA serves.
void register_kernels(Isa isa, const KernelTable *table);

} // namespace geglu_cpu
