#pragma once
// Where a CUDA op launches, through torch's stable ABI: the tensor's device made
// current for the call, and that device's current stream (the one torch's own ops and
// CUDA-graph capture use).

#include <cuda_runtime_api.h>

#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/tensor.h>

namespace geglu_cuda {

// torch's current CUDA stream of t's device (defined in ops.cpp).
cudaStream_t current_stream(const torch::stable::Tensor &t);

// A device made current until the end of the scope: DeviceGuard guard(t.get_device_index()).
using DeviceGuard = torch::stable::accelerator::DeviceGuard;

}  // namespace geglu_cuda
