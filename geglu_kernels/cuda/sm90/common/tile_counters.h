#pragma once
// Arrival counters for kernels whose work units count themselves in global memory
// (linear_swapab_sm90.cu's split-K tiles, mlp_fused_sm90.cu's splits): zero between
// calls, each kernel's last unit setting back what it counted. Host code.

#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <vector>

#include "sm90/common/sm90_launcher.cuh"

namespace tile_counters {

// In an unnamed namespace, as sm90_launcher's Runner: each library (and each translation
// unit) keeps its own sets.
namespace {

// `count` counters, zero between calls. Calls that may run at the same time must
// not share them, so a set belongs to a device, a stream and, for a call being captured
// into a CUDA graph, that capture: calls on one stream run one after another, and so do
// the launches of one graph, while two graphs captured on one stream may be replayed on
// two streams at once. A set is made on its first call and kept for the process (4 KB
// and up: one per stream and per graph); the first call may come inside the capture, so
// the allocation and the zeroing run outside it (relaxed capture mode, a private stream)
// and the graph holds no node for them. nullptr where CUDA refused.
int* get(int device, cudaStream_t stream, int64_t count) {
  struct Set {
    int device;
    cudaStream_t stream;
    unsigned long long capture;  // 0: not capturing
    int* counters;
    int64_t capacity;
  };
  constexpr int64_t kMinCapacity = 1024;
  static std::vector<Set> sets;
  static std::mutex mu;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long capture = 0;
  if (cudaStreamGetCaptureInfo(stream, &status, &capture) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  if (status != cudaStreamCaptureStatusActive) capture = 0;
  std::lock_guard<std::mutex> lock(mu);
  Set* slot = nullptr;
  for (Set& set : sets) {
    if (set.device == device && set.stream == stream && set.capture == capture) {
      if (set.capacity >= count) return set.counters;
      slot = &set;  // too small: a larger set replaces it (the old one may be in use: kept)
      break;
    }
  }
  const int64_t capacity = count > kMinCapacity ? count : kMinCapacity;
  int* counters = nullptr;
  cudaStream_t zeroing = nullptr;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode);
  cudaError_t e = cudaMalloc(&counters, size_t(capacity) * sizeof(int));
  if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&zeroing, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = cudaMemsetAsync(counters, 0, size_t(capacity) * sizeof(int), zeroing);
  if (e == cudaSuccess) e = cudaStreamSynchronize(zeroing);
  if (zeroing != nullptr) cudaStreamDestroy(zeroing);
  if (e != cudaSuccess && counters != nullptr) cudaFree(counters);
  cudaThreadExchangeStreamCaptureMode(&mode);
  if (e != cudaSuccess) {
    sm90_launcher::record_cuda_error(e);
    return nullptr;
  }
  if (slot != nullptr) {
    *slot = Set{device, stream, capture, counters, capacity};
  } else {
    sets.push_back(Set{device, stream, capture, counters, capacity});
  }
  return counters;
}

}  // namespace

}  // namespace tile_counters
