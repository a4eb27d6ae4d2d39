// The down projection for a few tokens on Hopper (sm_90a), swap-AB with K split: the C
// launcher of the kernel in linear_swapab_sm90.cuh (the design is there;
// linear_swapab_sm90.h has the ABI).

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "cutlass/cutlass.h"
#include "cutlass/kernel_hardware_info.h"

#include "sm90/bf16/linear_swapab_sm90.h"
#include "sm90/bf16/linear_swapab_sm90.cuh"
#include "sm90/common/sm90_launcher.cuh"
#include "sm90/common/tile_counters.h"

namespace linear_swapab {

using namespace cute;

// The split of K: the fewest k-tiles per SM, counting each work unit's tile as one more
// k-tile (its epilogue and the reduction's share); ties go to fewer splits.
int choose_splits(int64_t M, int64_t K, int64_t N, int sm_count) {
  const int64_t tiles = ((N + kTileRows - 1) / kTileRows) * ((M + kTileTokens - 1) / kTileTokens);
  const int64_t k_tiles = (K + kTileK - 1) / kTileK;
  int best = 1;
  int64_t best_cost = INT64_MAX;
  for (int s = 1; s <= kMaxSplits && s <= k_tiles; ++s) {
    const int64_t per_split = (k_tiles + s - 1) / s;
    if ((s - 1) * per_split >= k_tiles) continue;  // the last split would be empty
    const int64_t rounds = (tiles * s + sm_count - 1) / sm_count;
    const int64_t cost = rounds * (per_split + 1);
    if (cost < best_cost) best = s, best_cost = cost;
  }
  return best;
}

struct LaunchArgs {
  const void* x;
  int64_t M, K, ldx;
  const void* w;
  int64_t ldw, N;
  const void* bias;
  const void* residual;
  int64_t ldr;
  void* out;
  int64_t ldo;
  float* partials;
  int* counters;
  int splits;
};

template <class Element>
int run(LaunchArgs const& a, int device, int sm_count, cudaStream_t stream) {
  auto fill = [](auto& args, LaunchArgs const& a) {
    const int64_t k_tiles = (a.K + kTileK - 1) / kTileK;
    const int per_split = int((k_tiles + a.splits - 1) / a.splits);
    args.problem_shape = make_shape(int(a.N), int(a.M), per_split * kTileK, a.splits);
    auto& ml = args.mainloop;
    ml.ptr_A = static_cast<Element const*>(a.w);
    ml.dA = make_stride(a.ldw, Int<1>{}, a.N * a.ldw);
    ml.ptr_B = static_cast<Element const*>(a.x);
    ml.dB = make_stride(a.ldx, Int<1>{}, a.M * a.ldx);
    ml.K = int(a.K);
    auto& ep = args.epilogue;
    ep.partials = a.partials;
    ep.counters = a.counters;
    ep.bias = static_cast<Element const*>(a.bias);
    ep.residual = static_cast<Element const*>(a.residual);
    ep.ldr = a.ldr;
    ep.out = static_cast<Element*>(a.out);
    ep.ldo = a.ldo;
  };
  return sm90_launcher::launch_gemm<typename SplitKGemm<Element>::Kernel>(a, device, sm_count, stream, fill);
}

}  // namespace linear_swapab

extern "C" int64_t geglu_linear_swapab_sm90_workspace_bytes(int64_t M, int64_t K, int64_t N) {
  int device = 0;
  sm90_launcher::DeviceInfo const* info = sm90_launcher::current_sm90_device(&device);
  if (info == nullptr || M < 0 || K < 1 || N < 1) return 0;
  return linear_swapab::partials_bytes(linear_swapab::choose_splits(M, K, N, info->sm_count), M, N);
}

extern "C" int geglu_linear_swapab_sm90(const void* x, int64_t M, int64_t K, int64_t ldx, const void* w, int64_t ldw,
                                        const void* bias, const void* residual, int64_t ldr, void* out, int64_t N,
                                        int64_t ldo, void* workspace, int64_t workspace_bytes, int dtype,
                                        void* stream) {
  if (int status = sm90_launcher::check_dtype_and_extents(dtype, M, N, K)) return status;
  if (ldx < K || ldw < K || ldo < N || (residual != nullptr && ldr < N)) return GEGLU_SM90_ERR_SHAPE;
  if (M == 0) return GEGLU_SM90_OK;
  if ((K * 2) % 16 || (ldx * 2) % 16 || (ldw * 2) % 16) return GEGLU_SM90_ERR_STRIDE;
  auto misaligned = [](const void* p, uintptr_t bytes) { return (reinterpret_cast<uintptr_t>(p) & (bytes - 1)) != 0; };
  if (x == nullptr || w == nullptr || out == nullptr || workspace == nullptr) return GEGLU_SM90_ERR_ALIGN;
  if (misaligned(x, 16) || misaligned(w, 16) || misaligned(workspace, 16) || misaligned(out, 2) ||
      misaligned(bias, 2) || misaligned(residual, 2)) {
    return GEGLU_SM90_ERR_ALIGN;
  }
  int device = 0;
  sm90_launcher::DeviceInfo const* info = sm90_launcher::current_sm90_device(&device);
  if (info == nullptr) return GEGLU_SM90_ERR_DEVICE;
  const int splits = linear_swapab::choose_splits(M, K, N, info->sm_count);
  if (workspace_bytes < linear_swapab::partials_bytes(splits, M, N)) return GEGLU_SM90_ERR_SHAPE;
  const int64_t tiles = ((N + linear_swapab::kTileRows - 1) / linear_swapab::kTileRows) *
                        ((M + linear_swapab::kTileTokens - 1) / linear_swapab::kTileTokens);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  int* counters = tile_counters::get(device, s, tiles);
  if (counters == nullptr) return GEGLU_SM90_ERR_CUDA;
  linear_swapab::LaunchArgs a;  // the params-cache key: zeroed, padding included
  std::memset(&a, 0, sizeof a);
  a.x = x, a.M = M, a.K = K, a.ldx = ldx;
  a.w = w, a.ldw = ldw, a.N = N;
  a.bias = bias, a.residual = residual, a.ldr = residual != nullptr ? ldr : 0;
  a.out = out, a.ldo = ldo;
  a.partials = static_cast<float*>(workspace);
  a.counters = counters;
  a.splits = splits;
  if (dtype == GEGLU_SM90_BF16) return linear_swapab::run<cutlass::bfloat16_t>(a, device, info->sm_count, s);
  return linear_swapab::run<cutlass::half_t>(a, device, info->sm_count, s);
}
