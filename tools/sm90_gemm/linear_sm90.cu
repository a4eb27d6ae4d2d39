// Small-M linear for Hopper (sm_90a): CUTLASS 3.x kernels and the C launcher.
// See linear_sm90.h for the ABI and why it is swap-AB + stream-K.
//
// An experiment, not part of the product: at the decode shapes of the down projection
// it did not beat cuBLAS (benchmarks/results/h100_2026-11-23/linear_sm90_h100.log, docs/DESIGN.md), so
// the MLP op keeps torch's GEMM there. check_linear.py also times the engine's small-M
// variants against it.
//
// The GEMM CUTLASS sees (swap-AB): D[n, m] = sum_k W[n, k] x[m, k] + bias[n] + C[n, m]
//   A = W    [N, K], K contiguous (RowMajor)
//   B = x    [M, K], K contiguous (CUTLASS's ColumnMajor B)
//   C, D     [N, M] with stride (1, ld): element (n, m) at m * ld + n, i.e. the row-major
//            [M, N] residual / output the caller has (ColumnMajor in CUTLASS's terms).
// The bias is per row of D (LinCombPerRowBias: a column broadcast, NULL reads as 0).
//
// Build: tools/sm90_gemm/build_lib.sh tools/sm90_gemm/linear_sm90.cu liblinear_sm90.

#include "linear_sm90.h"

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>

#include "cutlass/cutlass.h"
#include "cutlass/kernel_hardware_info.h"
#include "cutlass/gemm/gemm.h"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "cutlass/device_kernel.h"

#include "sm90/common/sm90_launcher.cuh"  // device query (its Runner has no workspace: not used here)

namespace small_m_linear {

using namespace cute;

template <class Element, int BM, int BN, int BK, class Scheduler>
struct SmallMLinear {
  using TileShape = Shape<Int<BM>, Int<BN>, Int<BK>>;
  using ClusterShape = Shape<_1, _1, _1>;
  using Fusion = cutlass::epilogue::fusion::LinCombPerRowBias<Element, float, Element, Element, float>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float,
      Element, cutlass::layout::ColumnMajor, 8,  // C = residual^T
      Element, cutlass::layout::ColumnMajor, 8,  // D = out^T
      cutlass::epilogue::TmaWarpSpecializedCooperative, Fusion>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
      Element, cutlass::layout::RowMajor, 8,     // A = W [N, K]
      Element, cutlass::layout::ColumnMajor, 8,  // B = x [M, K]
      float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<
          static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue, Scheduler>;
  using Params = typename Kernel::Params;
  static constexpr bool kStreamK = std::is_same_v<Scheduler, cutlass::gemm::StreamKScheduler>;
};

struct LaunchArgs {
  const void* x;
  int64_t M, K, ldx;
  const void* w;
  int64_t N, ldw, w_batch_stride;
  int batch;
  const void* bias;
  const void* residual;
  int64_t ldr;
  void* out;
  int64_t ldo, out_batch_stride;
  int decomposition;  // 0 heuristic, 1 stream-K, 2 split-K, 3 data parallel
  int splits;
  int atomic_reduction;  // stream-K partials reduced in arrival order (not bitwise reproducible)
  void* workspace;
};

inline bool same_args(LaunchArgs const& a, LaunchArgs const& b) {
  return std::memcmp(&a, &b, sizeof(LaunchArgs)) == 0;
}

thread_local int g_last_cuda_error = 0;

inline int cuda_fail(cudaError_t e) {
  g_last_cuda_error = int(e);
  cudaGetLastError();
  return LINEAR_SM90_ERR_CUDA;
}

template <class Gemm>
typename Gemm::Kernel::Arguments make_arguments(LaunchArgs const& a, int device, int sm_count) {
  using Element = typename Gemm::Kernel::ElementA;
  typename Gemm::Kernel::Arguments args{};
  args.mode = a.batch > 1 ? cutlass::gemm::GemmUniversalMode::kBatched : cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = make_shape(int(a.N), int(a.M), int(a.K), a.batch);
  auto& ml = args.mainloop;
  ml.ptr_A = static_cast<Element const*>(a.w);
  ml.dA = make_stride(a.ldw, Int<1>{}, a.w_batch_stride);
  ml.ptr_B = static_cast<Element const*>(a.x);
  ml.dB = make_stride(a.ldx, Int<1>{}, int64_t(0));
  auto& ep = args.epilogue;
  // Without a residual, C aliases D with beta = 0: the epilogue then loads no source.
  ep.ptr_C = static_cast<Element const*>(a.residual ? a.residual : a.out);
  ep.dC = make_stride(Int<1>{}, a.residual ? a.ldr : a.ldo, a.out_batch_stride);
  ep.ptr_D = static_cast<Element*>(a.out);
  ep.dD = make_stride(Int<1>{}, a.ldo, a.out_batch_stride);
  ep.thread.alpha = 1.0f;
  ep.thread.beta = a.residual ? 1.0f : 0.0f;
  ep.thread.bias_ptr = static_cast<Element const*>(a.bias);
  args.hw_info.device_id = device;
  args.hw_info.sm_count = sm_count;
  if constexpr (Gemm::kStreamK) {
    using Mode = cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90StreamKParams::DecompositionMode;
    args.scheduler.decomposition_mode = a.decomposition == 1   ? Mode::StreamK
                                        : a.decomposition == 2 ? Mode::SplitK
                                        : a.decomposition == 3 ? Mode::DataParallel
                                                               : Mode::Heuristic;
    args.scheduler.splits = a.splits > 0 ? a.splits : 1;
    using Reduction = cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90StreamKParams::ReductionMode;
    args.scheduler.reduction_mode = a.atomic_reduction ? Reduction::Nondeterministic : Reduction::Deterministic;
  }
  return args;
}

template <class Gemm>
struct Runner {
  using Kernel = typename Gemm::Kernel;
  using Params = typename Gemm::Params;
  static constexpr int kCache = 8;
  struct Entry {
    bool valid = false;
    int device = -1;
    LaunchArgs args{};
    Params params{};
  };

  static size_t workspace_size(LaunchArgs const& a, int device, int sm_count) {
    return Kernel::get_workspace_size(make_arguments<Gemm>(a, device, sm_count));
  }

  static int run(LaunchArgs const& a, size_t workspace_bytes, int device, int sm_count, cudaStream_t stream) {
    static std::atomic<bool> attr_set[sm90_launcher::kMaxDevices];
    static std::mutex mu;
    static Entry cache[kCache];
    static int next_slot = 0;

    if (!attr_set[device].load(std::memory_order_acquire)) {
      cudaError_t e = cudaFuncSetAttribute(cutlass::device_kernel<Kernel>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           int(Kernel::SharedStorageSize));
      if (e != cudaSuccess) return cuda_fail(e);
      attr_set[device].store(true, std::memory_order_release);
    }

    auto args = make_arguments<Gemm>(a, device, sm_count);
    Params params;
    bool hit = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      for (auto& e : cache) {
        if (e.valid && e.device == device && same_args(e.args, a)) {
          params = e.params;
          hit = true;
          break;
        }
      }
    }
    if (!hit) {
      if (!Kernel::can_implement(args)) return LINEAR_SM90_ERR_CUTLASS;
      if (Kernel::get_workspace_size(args) > workspace_bytes) return LINEAR_SM90_ERR_WORKSPACE;
      params = Kernel::to_underlying_arguments(args, a.workspace);
      std::lock_guard<std::mutex> lock(mu);
      Entry& e = cache[next_slot];
      next_slot = (next_slot + 1) % kCache;
      e.valid = true;
      e.device = device;
      e.args = a;
      e.params = params;
    }
    // The stream-K flags must read zero when the kernel starts: cleared on the stream
    // every call (a memset node under graph capture).
    if (Kernel::get_workspace_size(args) != 0) {
      if (Kernel::initialize_workspace(args, a.workspace, stream) != cutlass::Status::kSuccess) {
        return cuda_fail(cudaGetLastError());
      }
    }

    cudaLaunchConfig_t cfg{};
    cfg.gridDim = Kernel::get_grid_shape(params);
    cfg.blockDim = Kernel::get_block_shape();
    cfg.dynamicSmemBytes = Kernel::SharedStorageSize;
    cfg.stream = stream;
    void* kargs[] = {&params};
    cudaError_t e = cudaLaunchKernelExC(&cfg, reinterpret_cast<void const*>(cutlass::device_kernel<Kernel>), kargs);
    if (e != cudaSuccess) return cuda_fail(e);
    return LINEAR_SM90_OK;
  }
};

using cutlass::gemm::PersistentScheduler;
using cutlass::gemm::StreamKScheduler;

// X(id, name, BM (weight rows), BN (tokens), BK, tile scheduler)
#define LINEAR_SM90_VARIANTS(X)                                      \
  X(0, "coop_128x16x128_streamk", 128, 16, 128, StreamKScheduler)    \
  X(1, "coop_128x32x128_streamk", 128, 32, 128, StreamKScheduler)    \
  X(2, "coop_128x64x128_streamk", 128, 64, 128, StreamKScheduler)    \
  X(3, "coop_128x16x64_streamk", 128, 16, 64, StreamKScheduler)      \
  X(4, "coop_128x16x128_persistent", 128, 16, 128, PersistentScheduler)

#define LINEAR_SM90_COUNT(id, ...) +1
constexpr int kNumConfigs = 0 LINEAR_SM90_VARIANTS(LINEAR_SM90_COUNT);
#define LINEAR_SM90_NAME(id, name, ...) name,
const char* const kConfigNames[] = {LINEAR_SM90_VARIANTS(LINEAR_SM90_NAME)};

template <class Element>
int dispatch(int variant, LaunchArgs const& a, size_t ws_bytes, size_t* ws_query, int device, int sm_count,
             cudaStream_t stream) {
  switch (variant) {
#define LINEAR_SM90_CASE(id, name, bm, bn, bk, sched)                                       \
  case id: {                                                                                \
    using R = Runner<SmallMLinear<Element, bm, bn, bk, sched>>;                             \
    if (ws_query) {                                                                         \
      *ws_query = R::workspace_size(a, device, sm_count);                                   \
      return LINEAR_SM90_OK;                                                                \
    }                                                                                       \
    return R::run(a, ws_bytes, device, sm_count, stream);                                   \
  }
    LINEAR_SM90_VARIANTS(LINEAR_SM90_CASE)
#undef LINEAR_SM90_CASE
    default:
      return LINEAR_SM90_ERR_CONFIG;
  }
}

// Token tile by M: the narrowest that covers M (the weight is read once per token tile).
int pick_config(int64_t M) {
  if (M <= 16) return 0;
  if (M <= 32) return 1;
  return 2;
}

int checked_call(LaunchArgs a, int dtype, int config, size_t ws_bytes, size_t* ws_query, cudaStream_t stream) {
  if (dtype != LINEAR_SM90_BF16 && dtype != LINEAR_SM90_FP16) return LINEAR_SM90_ERR_DTYPE;
  constexpr int64_t kMax = (int64_t(1) << 31) - 1;
  if (a.M < 0 || a.K < 1 || a.N < 1 || a.batch < 1 || a.M > kMax || a.K > kMax || a.N > kMax) {
    return LINEAR_SM90_ERR_SHAPE;
  }
  if (a.batch > 1 && (a.bias || a.residual || a.w_batch_stride < 0 || a.out_batch_stride < 0)) {
    return LINEAR_SM90_ERR_SHAPE;
  }
  if (config < 0) config = pick_config(a.M);
  const int variant = config & 0xff;
  a.decomposition = (config >> 8) & 0xf;
  a.splits = (config >> 12) & 0xff;
  a.atomic_reduction = (config >> 20) & 1;
  if (variant >= kNumConfigs || a.decomposition > 3 || (config >> 21) != 0) return LINEAR_SM90_ERR_CONFIG;

  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return LINEAR_SM90_ERR_DEVICE;
  }
  sm90_launcher::DeviceInfo const* info = sm90_launcher::device_info(device);
  if (info == nullptr || info->major != 9 || info->minor != 0) return LINEAR_SM90_ERR_DEVICE;
  if (!ws_query) {
    if (a.ldx < a.K || a.ldw < a.K || a.ldo < a.N || (a.residual && a.ldr < a.N)) return LINEAR_SM90_ERR_SHAPE;
    if (a.M == 0) return LINEAR_SM90_OK;
    const int64_t elem = 2;
    if ((a.K * elem) % 16 || (a.N * elem) % 16 || (a.ldx * elem) % 16 || (a.ldw * elem) % 16 ||
        (a.ldo * elem) % 16 || (a.residual && (a.ldr * elem) % 16) || (a.w_batch_stride * elem) % 16 ||
        (a.out_batch_stride * elem) % 16) {
      return LINEAR_SM90_ERR_STRIDE;
    }
    auto misaligned = [](const void* p) { return p == nullptr || (reinterpret_cast<uintptr_t>(p) & 15u) != 0; };
    if (misaligned(a.x) || misaligned(a.w) || misaligned(a.out) || (a.residual && misaligned(a.residual)) ||
        (reinterpret_cast<uintptr_t>(a.bias) & 3u)) {
      return LINEAR_SM90_ERR_ALIGN;
    }
  }
  if (dtype == LINEAR_SM90_BF16) {
    return dispatch<cutlass::bfloat16_t>(variant, a, ws_bytes, ws_query, device, info->sm_count, stream);
  }
  return dispatch<cutlass::half_t>(variant, a, ws_bytes, ws_query, device, info->sm_count, stream);
}

}  // namespace small_m_linear

extern "C" {

const char* linear_sm90_status_string(int status) {
  switch (status) {
    case LINEAR_SM90_OK: return "ok";
    case LINEAR_SM90_ERR_DTYPE: return "unsupported dtype (bf16 and fp16 only)";
    case LINEAR_SM90_ERR_SHAPE: return "unsupported shape (need K, N, batch >= 1, sizes < 2^31, ld >= row length; batch > 1 without bias or residual)";
    case LINEAR_SM90_ERR_STRIDE: return "unsupported strides (K, N, row and batch strides times element size must be multiples of 16 bytes)";
    case LINEAR_SM90_ERR_ALIGN: return "unsupported pointer alignment (x, w, out, residual 16-byte aligned and non-null; bias 4-byte aligned)";
    case LINEAR_SM90_ERR_DEVICE: return "current device is not sm_90 (Hopper)";
    case LINEAR_SM90_ERR_CONFIG: return "config out of range";
    case LINEAR_SM90_ERR_CUTLASS: return "CUTLASS rejected the problem";
    case LINEAR_SM90_ERR_CUDA: return "CUDA error (linear_sm90_last_cuda_error() has the code)";
    case LINEAR_SM90_ERR_WORKSPACE: return "workspace smaller than linear_sm90_workspace_size()";
    default: return "unknown status";
  }
}

int linear_sm90_last_cuda_error(void) { return small_m_linear::g_last_cuda_error; }
int linear_sm90_num_configs(void) { return small_m_linear::kNumConfigs; }
const char* linear_sm90_config_name(int config) {
  if (config < 0 || config >= small_m_linear::kNumConfigs) return "";
  return small_m_linear::kConfigNames[config];
}

int linear_sm90_workspace_size(int64_t M, int64_t N, int64_t K, int batch, int dtype, int config, size_t* bytes) {
  if (bytes == nullptr) return LINEAR_SM90_ERR_SHAPE;
  *bytes = 0;
  small_m_linear::LaunchArgs a;
  std::memset(&a, 0, sizeof a);  // padding too: the params cache compares bytes
  a.M = M;
  a.N = N;
  a.K = K;
  a.batch = batch;
  return small_m_linear::checked_call(a, dtype, config, 0, bytes, nullptr);
}

int linear_sm90(const void* x, int64_t M, int64_t K, int64_t ldx,
                const void* w, int64_t N, int64_t ldw, int64_t w_batch_stride, int batch,
                const void* bias, const void* residual, int64_t ldr,
                void* out, int64_t ldo, int64_t out_batch_stride,
                int dtype, int config, void* workspace, size_t workspace_bytes, void* stream) {
  small_m_linear::LaunchArgs a;
  std::memset(&a, 0, sizeof a);  // padding too: the params cache compares bytes
  a.x = x;
  a.M = M;
  a.K = K;
  a.ldx = ldx;
  a.w = w;
  a.N = N;
  a.ldw = ldw;
  a.w_batch_stride = w_batch_stride;
  a.batch = batch;
  a.bias = bias;
  a.residual = residual;
  a.ldr = ldr;
  a.out = out;
  a.ldo = ldo;
  a.out_batch_stride = out_batch_stride;
  a.workspace = workspace;
  return small_m_linear::checked_call(a, dtype, config, workspace_bytes, nullptr, static_cast<cudaStream_t>(stream));
}

}  // extern "C"
