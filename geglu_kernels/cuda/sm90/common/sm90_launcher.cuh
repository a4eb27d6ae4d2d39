#pragma once
// What the Hopper GEMM launchers share (geglu_gemm_sm90.cu, linear_gelu_sm90.cu, ...): the
// device query, the CUDA-error slot of the C ABIs, the checks their bf16/fp16 ABIs start
// with, and the launch of a CUTLASS 3.x GemmUniversal kernel with a small host-side cache
// of its built params (TMA descriptors are encoded on the host, ~microseconds each; a
// decode step calls the same shapes over and over).
//
// Host code; include after the CUTLASS headers.

#include <cuda_runtime.h>

#include <atomic>
#include <cstring>
#include <mutex>

#include "cutlass/device_kernel.h"
#include "cutlass/gemm/gemm.h"

#include "sm90/common/sm90_status.h"

namespace sm90_launcher {

struct DeviceInfo {
  int sm_count = 0;
  int major = 0, minor = 0;
};

constexpr int kMaxDevices = 64;

// Queried once per device; nullptr for an index out of range.
inline DeviceInfo const* device_info(int dev) {
  static DeviceInfo devices[kMaxDevices];
  static std::once_flag once[kMaxDevices];
  if (dev < 0 || dev >= kMaxDevices) return nullptr;
  std::call_once(once[dev], [dev] {
    DeviceInfo d;
    cudaDeviceGetAttribute(&d.sm_count, cudaDevAttrMultiProcessorCount, dev);
    cudaDeviceGetAttribute(&d.major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&d.minor, cudaDevAttrComputeCapabilityMinor, dev);
    cudaGetLastError();
    devices[dev] = d;
  });
  return &devices[dev];
}

// The current device when it is compute capability 9.0 (its index in *device), else
// nullptr (the caller returns GEGLU_SM90_ERR_DEVICE).
inline DeviceInfo const* current_sm90_device(int* device) {
  if (cudaGetDevice(device) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  DeviceInfo const* info = device_info(*device);
  return info != nullptr && info->major == 9 && info->minor == 0 ? info : nullptr;
}

// The CUDA error behind a launcher's "CUDA error" status, per thread; cleared from the
// runtime's last-error slot so that a fallback path does not see it.
inline int& last_cuda_error() {
  thread_local int error = 0;
  return error;
}

inline void record_cuda_error(cudaError_t e) {
  last_cuda_error() = int(e);
  cudaGetLastError();
}

enum class Launch { kOk, kRejected, kCudaError };

inline int status_of(Launch launch);  // below

// The checks a bf16/fp16 launcher starts with: the dtype, and a problem M x N x K whose
// extents fit the kernels' int32 problem shape (M may be 0: nothing to do; N is 2H for
// the gate/up kernels, whose accumulator holds both halves). GEGLU_SM90_OK or the error.
inline int check_dtype_and_extents(int dtype, int64_t M, int64_t N, int64_t K) {
  if (dtype != GEGLU_SM90_BF16 && dtype != GEGLU_SM90_FP16) return GEGLU_SM90_ERR_DTYPE;
  constexpr int64_t kMax = (int64_t(1) << 31) - 1;
  if (M < 0 || K < 1 || N < 1 || M > kMax || K > kMax || N > kMax) return GEGLU_SM90_ERR_SHAPE;
  return GEGLU_SM90_OK;
}

// In an unnamed namespace: its static cache and attribute flags would otherwise be GNU
// unique symbols, which the dynamic loader binds once per process, so two builds of
// this package loaded together (another variant, another version) would share them and
// the second build's kernels would launch without their shared-memory attribute set.
namespace {

// Launches Kernel for `args` (a trivially copyable key, compared bytewise: zero it,
// padding included, before filling it in). make_arguments(args) -> Kernel::Arguments
// is called only on a cache miss. A kernel that needs a workspace (stream-K's partial
// sums and flags) gets `workspace`, which the caller sized with workspace_bytes() and
// which belongs in the key; it is initialized on the stream before each launch. Without
// one such a kernel is rejected. A
// Cooperative kernel (one whose CTAs wait on each other) is launched only with every
// CTA resident at once: else CUDA refuses the launch (cudaErrorCooperativeLaunchTooLarge).
template <class Kernel, int ClusterM, int ClusterN, class LaunchArgs, bool Cooperative = false>
struct Runner {
  static_assert(!(Cooperative && ClusterM * ClusterN > 1), "a cooperative launch takes no cluster attribute here");
  using Params = typename Kernel::Params;
  static constexpr int kCache = 8;
  struct Entry {
    bool valid = false;
    int device = -1;
    LaunchArgs args{};
    Params params{};
    typename Kernel::Arguments kernel_args{};
    size_t workspace_bytes = 0;
  };

  template <class MakeArguments>
  static size_t workspace_bytes(LaunchArgs const& a, MakeArguments&& make_arguments) {
    return Kernel::get_workspace_size(make_arguments(a));
  }

  template <class MakeArguments>
  static Launch run(LaunchArgs const& a, int device, cudaStream_t stream, MakeArguments&& make_arguments,
                    void* workspace = nullptr) {
    static std::atomic<bool> attr_set[kMaxDevices];
    static std::mutex mu;
    static Entry cache[kCache];
    static int next_slot = 0;

    if (!attr_set[device].load(std::memory_order_acquire)) {
      cudaError_t e = cudaFuncSetAttribute(cutlass::device_kernel<Kernel>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           int(Kernel::SharedStorageSize));
      if (e != cudaSuccess) {
        record_cuda_error(e);
        return Launch::kCudaError;
      }
      attr_set[device].store(true, std::memory_order_release);
    }

    Params params;
    typename Kernel::Arguments kernel_args{};
    size_t ws_bytes = 0;
    bool hit = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      for (auto& e : cache) {
        if (e.valid && e.device == device && std::memcmp(&e.args, &a, sizeof(LaunchArgs)) == 0) {
          params = e.params;
          kernel_args = e.kernel_args;
          ws_bytes = e.workspace_bytes;
          hit = true;
          break;
        }
      }
    }
    if (!hit) {
      kernel_args = make_arguments(a);
      if (!Kernel::can_implement(kernel_args)) return Launch::kRejected;
      ws_bytes = Kernel::get_workspace_size(kernel_args);
      if (ws_bytes != 0 && workspace == nullptr) return Launch::kRejected;
      params = Kernel::to_underlying_arguments(kernel_args, workspace);
      std::lock_guard<std::mutex> lock(mu);
      Entry& e = cache[next_slot];
      next_slot = (next_slot + 1) % kCache;
      e.valid = true;
      e.device = device;
      e.args = a;
      e.params = params;
      e.kernel_args = kernel_args;
      e.workspace_bytes = ws_bytes;
    }
    if (ws_bytes != 0 &&
        Kernel::initialize_workspace(kernel_args, workspace, stream) != cutlass::Status::kSuccess) {
      record_cuda_error(cudaGetLastError());
      return Launch::kCudaError;
    }

    cudaLaunchConfig_t cfg{};
    cfg.gridDim = Kernel::get_grid_shape(params);
    cfg.blockDim = Kernel::get_block_shape();
    cfg.dynamicSmemBytes = Kernel::SharedStorageSize;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    if constexpr (ClusterM * ClusterN > 1) {
      attr[0].id = cudaLaunchAttributeClusterDimension;
      attr[0].val.clusterDim.x = ClusterM;
      attr[0].val.clusterDim.y = ClusterN;
      attr[0].val.clusterDim.z = 1;
      cfg.attrs = attr;
      cfg.numAttrs = 1;
    }
    if constexpr (Cooperative) {
      attr[0].id = cudaLaunchAttributeCooperative;
      attr[0].val.cooperative = 1;
      cfg.attrs = attr;
      cfg.numAttrs = 1;
    }
    void* kargs[] = {&params};
    cudaError_t e = cudaLaunchKernelExC(&cfg, reinterpret_cast<void const*>(cutlass::device_kernel<Kernel>), kargs);
    if (e != cudaSuccess) {
      record_cuda_error(e);
      return Launch::kCudaError;
    }
    return Launch::kOk;
  }
};

// Kernel::Arguments for a launch key: the mode and the device filled here, the rest by
// fill(args, key).
template <class Kernel, class Fill>
auto gemm_arguments(int device, int sm_count, Fill const& fill) {
  return [device, sm_count, &fill](auto const& key) {
    typename Kernel::Arguments args{};
    args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
    args.hw_info.device_id = device;
    args.hw_info.sm_count = sm_count;
    fill(args, key);
    return args;
  };
}

// Launches Kernel (a GemmUniversal) for `a` on device `device` with the arguments every
// launcher here gives it (kGemm mode, the device and its SM count for the persistent
// grid); fill(args, a) sets the rest (problem shape, mainloop, epilogue, scheduler) and is
// called on a params-cache miss only. Returns a GEGLU_SM90_* status.
template <class Kernel, int ClusterM = 1, int ClusterN = 1, class LaunchArgs, class Fill>
int launch_gemm(LaunchArgs const& a, int device, int sm_count, cudaStream_t stream, Fill&& fill,
                void* workspace = nullptr) {
  return status_of(Runner<Kernel, ClusterM, ClusterN, LaunchArgs>::run(
      a, device, stream, gemm_arguments<Kernel>(device, sm_count, fill), workspace));
}

// launch_gemm on the current device, GEGLU_SM90_ERR_DEVICE when it is not an sm_90 one:
// for the launchers whose key and kernel choice do not depend on the device.
template <class Kernel, int ClusterM = 1, int ClusterN = 1, class LaunchArgs, class Fill>
int launch_gemm_on_current_device(LaunchArgs const& a, cudaStream_t stream, Fill&& fill, void* workspace = nullptr) {
  int device = 0;
  DeviceInfo const* info = current_sm90_device(&device);
  if (info == nullptr) return GEGLU_SM90_ERR_DEVICE;
  return launch_gemm<Kernel, ClusterM, ClusterN>(a, device, info->sm_count, stream, fill, workspace);
}

// The workspace launch_gemm_on_current_device's `workspace` needs for `a` (0 off sm_90).
template <class Kernel, class LaunchArgs, class Fill>
size_t gemm_workspace_bytes_on_current_device(LaunchArgs const& a, Fill&& fill) {
  int device = 0;
  DeviceInfo const* info = current_sm90_device(&device);
  if (info == nullptr) return 0;
  return Kernel::get_workspace_size(gemm_arguments<Kernel>(device, info->sm_count, fill)(a));
}

}  // namespace

// What geglu_gemm_sm90_status_string() says (sm90_status.h).
inline const char* status_string(int status) {
  switch (status) {
    case GEGLU_SM90_OK: return "ok";
    case GEGLU_SM90_ERR_DTYPE: return "unsupported dtype (bf16 and fp16 only)";
    case GEGLU_SM90_ERR_SHAPE: return "unsupported shape (need K >= 1, H >= 1, sizes < 2^31, ldx >= K, ldw >= K, ldo >= H)";
    case GEGLU_SM90_ERR_STRIDE: return "unsupported strides (K, ldx, ldw, ldo times element size must be multiples of 16 bytes)";
    case GEGLU_SM90_ERR_ALIGN: return "unsupported pointer alignment (x, w_gate, w_up, out must be 16-byte aligned and non-null; biases 4-byte aligned)";
    case GEGLU_SM90_ERR_DEVICE: return "current device is not sm_90 (Hopper)";
    case GEGLU_SM90_ERR_CONFIG: return "config index out of range";
    case GEGLU_SM90_ERR_CUTLASS: return "CUTLASS rejected the problem";
    case GEGLU_SM90_ERR_CUDA: return "CUDA error at launch (geglu_gemm_sm90_last_cuda_error() has the code)";
    default: return "unknown status";
  }
}

inline int status_of(Launch launch) {
  switch (launch) {
    case Launch::kOk: return GEGLU_SM90_OK;
    case Launch::kRejected: return GEGLU_SM90_ERR_CUTLASS;
    default: return GEGLU_SM90_ERR_CUDA;
  }
}

}  // namespace sm90_launcher
