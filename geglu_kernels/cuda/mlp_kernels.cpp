// The fused inference GEMMs the native ops ask the CUDA backend for (torch_binding.h),
// decided on the host from shapes, dtype, alignment and the device alone (no data, no
// sync: the same choice is replayed under CUDA-graph capture):
// - fused_gate_up (_geglu_mlp): the Hopper GEMM engine (geglu_gemm_sm90.cu) on sm_90
//   for bf16/fp16 with 16-byte aligned rows, at every token count; elsewhere none (the
//   op runs cuBLAS writing [gate | up], then the geglu kernel);
// - fused_linear_gelu (_linear_bias_gelu): the engine's bias + GELU GEMM
//   (linear_gelu_sm90.cu) on sm_90 where it measured faster than cuBLAS(Lt)
//   (benchmarks/results/linear_gelu_sm90_h100.log, median us, H100):
//     exact GELU, against F.linear + F.gelu:   8192x1024->4096 139.6 vs 154.5,
//       8192x1600->6400 277.3 vs 339.2, 4096x2048->5120 146.5 vs 158.3;
//     tanh GELU, against cuBLASLt's GELU_BIAS epilogue: 111.7 vs 115.9 and 248.9 vs
//       279.4 at the first two, but 142.5 vs 132.6 at K = 2048, so tanh only for
//       K <= 1600;
//     64 tokens: 10.1 vs 6.9 (exact), 8.9 vs 5.4 (tanh): cuBLAS up to M = 128.

#include <atomic>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include "geglu_gemm_sm90.h"
#include "linear_gelu_sm90.h"
#include "torch_binding.h"

namespace {

bool aligned16(const at::Tensor &t) {
  const int64_t elems = 16 / t.element_size();
  return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 && t.stride(1) == 1 && t.stride(0) % elems == 0 &&
         t.size(1) % elems == 0;
}

// Compute capability 9.0, queried once per device (ATen's device-properties cache
// lives in a header that pulls in cuBLAS/cuSPARSE; the runtime attribute is enough).
bool is_sm90(const at::Tensor &t) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> known[kMaxDevices];  // 0: not asked yet, 1: sm_90, 2: other
  const int device = t.device().index();
  if (device < 0 || device >= kMaxDevices) return false;
  int state = known[device].load(std::memory_order_relaxed);
  if (state == 0) {
    int major = 0, minor = 0;
    const bool ok = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
                    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess;
    if (!ok) cudaGetLastError();  // clear it: not ours to report
    state = ok && major == 9 && minor == 0 ? 1 : 2;
    known[device].store(state, std::memory_order_relaxed);
  }
  return state == 1;
}

// The engine's rules (geglu_gemm_sm90.h), checked before anything is allocated.
bool sm90_serves(const at::Tensor &x, const at::Tensor &w_gate, const at::Tensor &w_up,
                 const c10::optional<at::Tensor> &b_gate, const c10::optional<at::Tensor> &b_up) {
  const auto dtype = x.scalar_type();
  if (dtype != at::kBFloat16 && dtype != at::kHalf) return false;
  if (w_gate.stride(0) != w_up.stride(0) || w_gate.size(0) % 8 != 0) return false;  // out rows 16-byte aligned
  constexpr int64_t kMax = (int64_t(1) << 31) - 1;  // the engine's int32 problem sizes
  if (x.size(0) > kMax || x.size(1) > kMax || 2 * w_gate.size(0) > kMax) return false;
  for (const auto *b : {&b_gate, &b_up}) {
    if (b->has_value() && !(*b)->is_contiguous()) return false;
  }
  return aligned16(x) && aligned16(w_gate) && aligned16(w_up) && is_sm90(x);
}

int sm90_dtype(const at::Tensor &x) { return x.scalar_type() == at::kBFloat16 ? GEGLU_SM90_BF16 : GEGLU_SM90_FP16; }

}  // namespace

torch::Tensor fused_gate_up(torch::Tensor const &x, torch::Tensor const &w_gate, torch::Tensor const &w_up,
                            c10::optional<torch::Tensor> const &b_gate, c10::optional<torch::Tensor> const &b_up,
                            bool tanh) {
  if (!sm90_serves(x, w_gate, w_up, b_gate, b_up)) return {};
  const c10::cuda::CUDAGuard guard(x.device());
  const int64_t m = x.size(0), k = x.size(1), hidden = w_gate.size(0);
  at::Tensor out = at::empty({m, hidden}, x.options());
  const int status = geglu_gemm_sm90(
      x.data_ptr(), m, k, x.stride(0), w_gate.data_ptr(), w_up.data_ptr(), w_gate.stride(0),
      b_gate.has_value() ? b_gate->data_ptr() : nullptr, b_up.has_value() ? b_up->data_ptr() : nullptr,
      out.data_ptr(), hidden, out.stride(0), sm90_dtype(x), tanh, /*config=*/-1,
      c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(status == GEGLU_SM90_OK, "_geglu_mlp: the sm90 GEMM engine refused the call: ",
              geglu_gemm_sm90_status_string(status));
  return out;
}

torch::Tensor fused_linear_gelu(torch::Tensor const &x, torch::Tensor const &weight,
                                c10::optional<torch::Tensor> const &bias, bool tanh) {
  const int64_t m = x.size(0), k = x.size(1), n = weight.size(0);
  const auto dtype = x.scalar_type();
  constexpr int64_t kMax = (int64_t(1) << 31) - 1;  // the engine's int32 problem sizes
  if (dtype != at::kBFloat16 && dtype != at::kHalf) return {};
  if (m <= 128 || (tanh && k > 1600) || m > kMax || k > kMax || n > kMax || n % 8 != 0) return {};
  if (bias.has_value() && !bias->is_contiguous()) return {};
  if (!aligned16(x) || !aligned16(weight) || !is_sm90(x)) return {};
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor out = at::empty({m, n}, x.options());
  const int status = linear_gelu_sm90(x.data_ptr(), m, k, x.stride(0), weight.data_ptr(), n, weight.stride(0),
                                      bias.has_value() ? bias->data_ptr() : nullptr, out.data_ptr(), out.stride(0),
                                      sm90_dtype(x), tanh, /*config=*/-1, c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(status == GEGLU_SM90_OK, "_linear_bias_gelu: the sm90 GEMM engine refused the call: ",
              geglu_gemm_sm90_status_string(status));
  return out;
}
