#pragma once
// The one kernel pattern behind every CUDA op of this package, as seen from host code:
// an elementwise map over [rows, width] matrices with 1-3 inputs and 1-2 outputs,
// each operand with its own base pointer and row stride (unit stride along width).
//
// Kept free of ATen so that geglu_cuda.cu, which nvcc parses once per GPU
// architecture, includes only light c10 headers; argument checking lives in ops.cpp.

#include <cstdint>

#include <c10/core/ScalarType.h>

namespace geglu_cuda {

enum class RowwiseOp {
  kGelu,               // in: x                     out: gelu(x)
  kGeluTanh,           //
  kGeglu,              // in: gate, up              out: gelu(gate) * up
  kGegluTanh,          //
  kGegluBackward,      // in: grad_out, gate, up    out: grad_gate, grad_up
  kGegluBackwardTanh,  //
};

struct Operand {
  void *ptr;           // element (0, 0)
  int64_t row_stride;  // in elements; >= width unless rows == 1
};

// Launches on the current CUDA stream of the current device (the caller sets the
// device). dtype is float32, float16 or bfloat16 for every operand; `in` and `out`
// hold as many operands as `op` takes. rows * width may exceed 2^31.
void launch_rowwise(RowwiseOp op, c10::ScalarType dtype, int64_t rows, int64_t width, const Operand *in,
                    const Operand *out);

}  // namespace geglu_cuda
