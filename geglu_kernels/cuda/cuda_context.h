#pragma once
// Where a CUDA op launches, through torch's stable ABI: the current stream of the
// tensor's device (the one torch's own ops and CUDA-graph capture use). The device
// itself is made current by common/device_tensors.h's device::DeviceGuard.

#include <cuda_runtime_api.h>

#include <torch/csrc/stable/tensor.h>

namespace geglu_cuda {

// torch's current CUDA stream of t's device (defined in ops.cpp).
cudaStream_t current_stream(const torch::stable::Tensor &t);

}  // namespace geglu_cuda
