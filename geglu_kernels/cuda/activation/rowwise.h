#pragma once
// The one kernel pattern behind every CUDA op of this package, as seen from host code:
// an elementwise map over [rows, width] matrices with 1-3 inputs and 1-2 outputs,
// each operand with its own base pointer and row stride (unit stride along width).
//
// Kept free of torch (geglu_cuda.cu, which nvcc parses once per GPU architecture,
// includes only the CUDA runtime); argument checking lives in ops.cpp.

#include <cstdint>

#include <cuda_runtime_api.h>

namespace geglu_cuda {

enum class RowwiseOp {
  kGelu,               // in: x                     out: gelu(x)
  kGeluTanh,           //
  kGeglu,              // in: gate, up              out: gelu(gate) * up
  kGegluTanh,          //
  kGegluBackward,      // in: grad_out, gate, up    out: grad_gate, grad_up
  kGegluBackwardTanh,  //
};

enum class RowwiseDtype { kFloat32, kFloat16, kBFloat16 };

struct Operand {
  void *ptr;           // element (0, 0)
  int64_t row_stride;  // in elements; >= width unless rows == 1
};

// Launches on `stream` of `device` (the caller makes `device` current): the same
// dtype for every operand; `in` and `out` hold as many operands as `op` takes.
// rows * width may exceed 2^31. A failed launch throws std::runtime_error.
void launch_rowwise(RowwiseOp op, RowwiseDtype dtype, int64_t rows, int64_t width, const Operand *in,
                    const Operand *out, int device, cudaStream_t stream);

}  // namespace geglu_cuda
