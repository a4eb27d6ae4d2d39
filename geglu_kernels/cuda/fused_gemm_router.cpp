// The CUDA backend's kernel router: for each fused inference GEMM the per-layer ops ask
// for (common/fused_gemms.h), which kernel serves the call, decided on the host from
// shapes, dtype, alignment and the device alone (no data, no sync: the same choice is
// replayed under CUDA-graph capture). Every kernel here is sm_90 only and takes bf16/fp16
// with 16-byte aligned rows; any other call gets std::nullopt and the op runs torch's
// GEMMs (cuBLAS). One rule serves the H100 and the H200. The measurements behind each rule
// and threshold: docs/DESIGN.md, "GEMMs" and "Decode GEMMs and what bounds a decode step".
// - fused_gate_up (_geglu_mlp, _geglu_linear): the swap-AB gate/up (geglu_swapab_sm90.cu: the weights on
//   the wgmma's 128-row side) at 1-32 tokens, where it beats the engine's tiles; the Hopper
//   GEMM engine (geglu_gemm_sm90.cu) above, where the engine's 64-row tile wins.
// - fused_down (_geglu_mlp's down projection; down_serves, down_kernel_by_size):
//   - at 1-4 tokens (kDecodeTokens), the decode linear (decode_sm90.cu) where its grid fits
//     on the GPU at once (geglu_decode_sm90_linear_max_n): it beats cuBLAS's addmm;
//   - else at up to 32 tokens with a weight of >= 48 MiB (kSplitKMinWeightBytes), the
//     split-K swap-AB linear (linear_swapab_sm90.cu): below, its fixed cost loses to addmm;
//   - else none (torch's GEMM, with b_down and the residual).
// - fused_small_batch_mlp (_geglu_mlp, 1-32 tokens): the swap-AB gate/up and one of the
//   down kernels, with y, h and the split-K workspace in one allocation (an allocator call and
//   torch's GEMM call fewer of host time). For a transformer MLP (the output as wide as x)
//   both GEMMs run as one kernel (mlp_fused_sm90.cu) with a down weight of >= 48 MiB, or of
//   >= 40 MiB (kOneKernelMinWeightBytes) where the decode linear does not serve: one launch
//   fewer, and as fast or faster there; with a 32 MiB weight it lost.
// - fused_fp8_mlp (_geglu_mlp_fp8): on sm_90 (fp8_mlp_served), x quantized per 1x128 group
//   (fp8_quantize_rows.cu), the block-scaled FP8 gate/up GEMM with the GeGLU and h's
//   quantization in its epilogue, the block-scaled down GEMM with the residual
//   (fp8_mlp_sm90.cu; stream-K at up to 64 tokens, its workspace in the one allocation);
//   at 1-16 tokens the weight-streaming decode kernels in place of both GEMMs, the gate/up
//   quantizing x itself (fp8_decode_sm90.cu); elsewhere the Python function runs its
//   dequantizing composite.
// - fused_fp8_linear (_fp8_linear): the same engine for one block-scaled FP8 linear: at 1-16
//   tokens one decode kernel that quantizes x itself; above, x's quantization, then the
//   MLP's down GEMM with the residual (stream-K at up to 64, data-parallel or 2-CTA
//   clusters above).
// - fused_linear_gelu (_linear_bias_gelu): the engine's bias + GELU GEMM
//   (linear_gelu_sm90.cu) above 128 tokens, where it beats cuBLAS(Lt) with either GELU;
//   cuBLAS up to M = 128.

#include <atomic>
#include <optional>
#include <string>

#include <cuda_runtime_api.h>

#include "common/tensor_checks.h"
#include "cuda_context.h"
#include "sm90/decode/decode_sm90.h"
#include "sm90/fp8/fp8_mlp_sm90.h"
#include "sm90/bf16/geglu_gemm_sm90.h"
#include "sm90/bf16/geglu_swapab_sm90.h"
#include "sm90/bf16/linear_gelu_sm90.h"
#include "sm90/bf16/linear_swapab_sm90.h"
#include "sm90/decode/mlp_fused_sm90.h"
#include "common/device_tensors.h"
#include "common/fused_gemms.h"

namespace geglu_stable {
namespace {

// Rows of 16-byte words, each starting 16-byte aligned, none overlapping the next (an
// expanded row stride of 0 goes to torch's GEMMs, as the kernels' launchers would refuse it).
bool aligned16(const Tensor &t) {
  const int64_t elems = 16 / static_cast<int64_t>(t.element_size());
  return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 && t.stride(1) == 1 && t.stride(0) % elems == 0 &&
         t.size(1) % elems == 0 && t.stride(0) >= t.size(1);
}

// Compute capability 9.0, queried once per device (the runtime attribute; the stable
// ABI has no device-properties cache).
bool is_sm90(const Tensor &t) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> known[kMaxDevices];  // 0: not asked yet, 1: sm_90, 2: other
  const int device = t.get_device_index();
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

bool engine_dtype(const Tensor &x) {
  return x.scalar_type() == ScalarType::BFloat16 || x.scalar_type() == ScalarType::Half;
}

int sm90_dtype(const Tensor &x) {
  return x.scalar_type() == ScalarType::BFloat16 ? GEGLU_SM90_BF16 : GEGLU_SM90_FP16;
}

const void *ptr_or_null(const OptTensor &t) { return t.has_value() ? t->data_ptr() : nullptr; }

// A status other than OK after the caller's own checks is a defect: raise, naming it.
void check_status(const char *op, int status) {
  STD_TORCH_CHECK(status == GEGLU_SM90_OK, op, ": the sm90 GEMM engine refused the call: ",
                  geglu_gemm_sm90_status_string(status));
}

constexpr int64_t kMaxInt32 = (int64_t(1) << 31) - 1;  // the engine's int32 problem sizes
// The routes by token count, see the top: the decode linear (<= GEGLU_DECODE_LINEAR_MAX_M)
// and the swap-AB gate/up.
constexpr int64_t kDecodeTokens = 4;
static_assert(kDecodeTokens <= GEGLU_DECODE_LINEAR_MAX_M);
constexpr int64_t kSwapAbTokens = 32;
// The split-K down projection's smallest weight (N x K elements): below, its fixed cost
// (the last unit of each tile sums the splits) lost to cuBLAS's addmm (see the top).
constexpr int64_t kSplitKMinWeightBytes = int64_t(48) << 20;
// The one-kernel MLP's smallest down weight where the decode linear does not serve (see
// the top): Gemma-2-2B's 40.5 MiB ran faster than the swap-AB gate/up + addmm, a 32 MiB
// one (2048 x 8192) slower.
constexpr int64_t kOneKernelMinWeightBytes = int64_t(40) << 20;
// The bias + GELU engine's first token count past cuBLAS(Lt) (see the top).
constexpr int64_t kLinearGeluMaxCublasTokens = 128;

// The engine's rules (geglu_gemm_sm90.h; the swap-AB kernel's, geglu_swapab_sm90.h, are
// the same or looser), checked before anything is allocated.
bool sm90_serves(const Tensor &x, const Tensor &w_gate, const Tensor &w_up, const OptTensor &b_gate,
                 const OptTensor &b_up) {
  if (!engine_dtype(x)) return false;
  if (w_gate.stride(0) != w_up.stride(0) || w_gate.size(0) % 8 != 0) return false;  // out rows 16-byte aligned
  if (x.size(0) > kMaxInt32 || x.size(1) > kMaxInt32 || 2 * w_gate.size(0) > kMaxInt32) return false;
  for (const OptTensor *b : {&b_gate, &b_up}) {
    if (b->has_value() && !(*b)->is_contiguous()) return false;
  }
  return aligned16(x) && aligned16(w_gate) && aligned16(w_up) && is_sm90(x);
}

// The swap-AB gate/up into out ([M, hidden], row stride ldo) on x's device and stream.
void launch_swapab_gate_up(const char *op, const Tensor &x, const Tensor &w_gate, const Tensor &w_up,
                           const OptTensor &b_gate, const OptTensor &b_up, void *out, int64_t ldo, bool tanh) {
  check_status(op, geglu_swapab_sm90(x.data_ptr(), x.size(0), x.size(1), x.stride(0), w_gate.data_ptr(),
                                     w_up.data_ptr(), w_gate.stride(0), ptr_or_null(b_gate), ptr_or_null(b_up), out,
                                     w_gate.size(0), ldo, sm90_dtype(x), tanh, geglu_cuda::current_stream(x)));
}

Tensor launch_gate_up(const char *op, const Tensor &x, const Tensor &w_gate, const Tensor &w_up,
                      const OptTensor &b_gate, const OptTensor &b_up, bool tanh) {
  const device::DeviceGuard guard(x.get_device_index());
  const int64_t m = x.size(0), k = x.size(1), hidden = w_gate.size(0);
  const int64_t shape[2] = {m, hidden};
  Tensor out = device::empty(IntArrayRef(shape, 2), x);
  if (m == 0 || hidden == 0) return out;
  if (m <= kSwapAbTokens) {
    launch_swapab_gate_up(op, x, w_gate, w_up, b_gate, b_up, out.data_ptr(), out.stride(0), tanh);
    return out;
  }
  check_status(op, geglu_gemm_sm90(x.data_ptr(), m, k, x.stride(0), w_gate.data_ptr(), w_up.data_ptr(),
                                   w_gate.stride(0), ptr_or_null(b_gate), ptr_or_null(b_up), out.data_ptr(), hidden,
                                   out.stride(0), sm90_dtype(x), tanh, geglu_cuda::current_stream(x)));
  return out;
}

// The down projection's kernels on sm_90, by token count and weight size (see the top).
enum class Down { kTorch, kDecodeLinear, kSplitK };

int64_t weight_bytes(const Tensor &w) { return w.size(0) * w.size(1) * static_cast<int64_t>(w.element_size()); }

// Whether the sm_90 down kernels take h @ w_down.T + b_down + residual for h [m, k] of
// aligned 16-byte rows in bf16/fp16 at all (the caller's checks): sizes, layouts.
bool down_serves(int64_t m, int64_t k, const Tensor &w_down, const OptTensor &b_down, const OptTensor &residual) {
  const int64_t n = w_down.size(0);
  if (m < 1 || m > kSwapAbTokens || k < 1 || k > kMaxInt32 || n < 1 || n > kMaxInt32) return false;
  if (b_down.has_value() && !b_down->is_contiguous()) return false;
  // A residual broadcast along the tokens (row stride 0) or the columns: torch's addmm.
  if (residual.has_value() && (residual->stride(1) != 1 || residual->stride(0) < n)) return false;
  return aligned16(w_down);
}

// Which kernel runs a down projection that down_serves alone, by its sizes (see the top).
Down down_kernel_by_size(int64_t m, const Tensor &w_down) {
  // The decode linear's grid in one wave of blocks (a second wave: decode_sm90.h).
  if (m <= kDecodeTokens && w_down.size(0) <= geglu_decode_sm90_linear_max_n()) return Down::kDecodeLinear;
  if (weight_bytes(w_down) >= kSplitKMinWeightBytes) return Down::kSplitK;
  return Down::kTorch;
}

// Whether the MLP runs as one kernel, given the down kernel that would serve it alone:
// a transformer MLP (the output as wide as x) with a down weight of >= 48 MiB, or of
// >= 40 MiB where the decode linear does not serve (see the top).
bool one_kernel_mlp(const Tensor &x, const Tensor &w_down, Down alone) {
  if (w_down.size(0) != x.size(1)) return false;
  const int64_t bytes = weight_bytes(w_down);
  return bytes >= kSplitKMinWeightBytes || (bytes >= kOneKernelMinWeightBytes && alone != Down::kDecodeLinear);
}

// A kernel's workspace of `bytes` in elements of `like`'s dtype, whole 16-byte words.
int64_t workspace_elems(int64_t bytes, const Tensor &like) {
  return (bytes + 15) / 16 * (16 / static_cast<int64_t>(like.element_size()));
}

// The float32 workspace the split-K kernel needs (0 for the decode linear), in elements
// of `like`'s dtype (workspace_elems).
int64_t down_workspace_elems(Down kind, int64_t m, int64_t k, int64_t n, const Tensor &like) {
  if (kind != Down::kSplitK) return 0;
  return workspace_elems(geglu_linear_swapab_sm90_workspace_bytes(m, k, n), like);
}

// The down projection into out ([m, N], row stride N) on `like`'s device and stream;
// workspace: down_workspace_elems elements, 16-byte aligned.
void launch_down(Down kind, const Tensor &like, const void *h, int64_t m, int64_t k, int64_t ldh,
                 const Tensor &w_down, const OptTensor &b_down, const OptTensor &residual, void *out,
                 void *workspace, int64_t workspace_elems) {
  const int64_t n = w_down.size(0), ldr = residual.has_value() ? residual->stride(0) : 0;
  if (kind == Down::kDecodeLinear) {
    check_status("_geglu_mlp", geglu_decode_sm90_linear(h, m, k, ldh, w_down.data_ptr(), w_down.stride(0),
                                                        ptr_or_null(b_down), ptr_or_null(residual), ldr, out, n, n,
                                                        sm90_dtype(like), geglu_cuda::current_stream(like)));
    return;
  }
  check_status("_geglu_mlp",
               geglu_linear_swapab_sm90(h, m, k, ldh, w_down.data_ptr(), w_down.stride(0), ptr_or_null(b_down),
                                        ptr_or_null(residual), ldr, out, n, n, workspace,
                                        workspace_elems * static_cast<int64_t>(like.element_size()),
                                        sm90_dtype(like), geglu_cuda::current_stream(like)));
}

// elems elements of `like`'s dtype rounded up to whole 16-byte words: where what follows
// y ([m, n], first in a buffer) starts, aligned.
int64_t aligned_elems(int64_t elems, const Tensor &like) {
  const int64_t per16 = 16 / static_cast<int64_t>(like.element_size());
  return (elems + per16 - 1) / per16 * per16;
}

// The MLP in one kernel (mlp_fused_sm90.cu) into one allocation: y (returned, shaped
// out_shape), then h, then the kernel's workspace, each from a 16-byte boundary. nullopt,
// having launched nothing, where CUDA refused the cooperative launch (its grid takes up to
// one CTA per SM; MPS or green contexts may leave fewer): the caller runs the two kernels.
OptTensor launch_mlp_one_kernel(const Tensor &x, const Tensor &w_gate, const Tensor &w_up, const OptTensor &b_gate,
                                const OptTensor &b_up, const Tensor &w_down, const OptTensor &b_down,
                                const OptTensor &residual, bool tanh, IntArrayRef out_shape) {
  const int64_t m = x.size(0), d = x.size(1), hidden = w_gate.size(0);
  const int64_t y_elems = aligned_elems(m * d, x), h_elems = m * hidden;
  const int64_t ws_elems = workspace_elems(geglu_mlp_fused_sm90_workspace_bytes(m, d, hidden), x);
  const int64_t size[1] = {y_elems + h_elems + ws_elems};
  Tensor buffer = device::empty(IntArrayRef(size, 1), x);
  Tensor y = device::contiguous_view(buffer, out_shape);
  char *base = static_cast<char *>(buffer.data_ptr());
  const int64_t elem = buffer.element_size();
  const int status = geglu_mlp_fused_sm90(
      x.data_ptr(), m, d, x.stride(0), w_gate.data_ptr(), w_up.data_ptr(), w_gate.stride(0), ptr_or_null(b_gate),
      ptr_or_null(b_up), w_down.data_ptr(), w_down.stride(0), ptr_or_null(b_down), ptr_or_null(residual),
      residual.has_value() ? residual->stride(0) : 0, base + y_elems * elem, hidden, hidden, y.data_ptr(), d,
      base + (y_elems + h_elems) * elem, ws_elems * elem, sm90_dtype(x), tanh, geglu_cuda::current_stream(x));
  if (status == GEGLU_SM90_ERR_CUDA && geglu_gemm_sm90_last_cuda_error() == cudaErrorCooperativeLaunchTooLarge) {
    return std::nullopt;
  }
  check_status("_geglu_mlp", status);
  return y;
}

}  // namespace

OptTensor fused_gate_up(const Tensor &x, const Tensor &w_gate, const Tensor &w_up, const OptTensor &b_gate,
                        const OptTensor &b_up, bool tanh) {
  if (!sm90_serves(x, w_gate, w_up, b_gate, b_up)) return std::nullopt;
  return launch_gate_up("the fused gate/up GEMM", x, w_gate, w_up, b_gate, b_up, tanh);
}

OptTensor fused_down(const Tensor &h, const Tensor &w_down, const OptTensor &b_down, const OptTensor &residual) {
  if (!engine_dtype(h) || !aligned16(h) || !is_sm90(h)) return std::nullopt;
  const int64_t m = h.size(0), k = h.size(1), n = w_down.size(0);
  if (!down_serves(m, k, w_down, b_down, residual)) return std::nullopt;
  const Down kind = down_kernel_by_size(m, w_down);
  if (kind == Down::kTorch) return std::nullopt;
  const device::DeviceGuard guard(h.get_device_index());
  // y, then the split-K kernel's workspace from the next 16-byte boundary.
  const int64_t y_elems = aligned_elems(m * n, h), ws_elems = down_workspace_elems(kind, m, k, n, h);
  const int64_t size[1] = {y_elems + ws_elems};
  Tensor buffer = device::empty(IntArrayRef(size, 1), h);
  const int64_t shape[2] = {m, n};
  Tensor y = device::contiguous_view(buffer, IntArrayRef(shape, 2));
  char *base = static_cast<char *>(buffer.data_ptr());
  launch_down(kind, h, h.data_ptr(), m, k, h.stride(0), w_down, b_down, residual, y.data_ptr(),
              base + y_elems * buffer.element_size(), ws_elems);
  return y;
}

OptTensor fused_small_batch_mlp(const Tensor &x, const Tensor &w_gate, const Tensor &w_up, const OptTensor &b_gate,
                                const OptTensor &b_up, const Tensor &w_down, const OptTensor &b_down,
                                const OptTensor &residual, bool tanh, IntArrayRef out_shape) {
  const int64_t m = x.size(0), hidden = w_gate.size(0), n = w_down.size(0);
  if (m > kSwapAbTokens || !sm90_serves(x, w_gate, w_up, b_gate, b_up)) return std::nullopt;
  if (!down_serves(m, hidden, w_down, b_down, residual)) return std::nullopt;
  const Down kind = down_kernel_by_size(m, w_down);
  if (one_kernel_mlp(x, w_down, kind)) {
    if (OptTensor y = launch_mlp_one_kernel(x, w_gate, w_up, b_gate, b_up, w_down, b_down, residual, tanh, out_shape)) {
      return y;
    }
  }
  if (kind == Down::kTorch) return std::nullopt;
  // y first (the tensor returned, at offset 0), then h from the next 16-byte boundary
  // (hidden is a multiple of 8: sm90_serves), so h's rows are the aligned rows the down
  // projection reads, then the split-K kernel's workspace.
  const int64_t y_elems = aligned_elems(m * n, x), ws_elems = down_workspace_elems(kind, m, hidden, n, x);
  const int64_t size[1] = {y_elems + m * hidden + ws_elems};
  Tensor buffer = device::empty(IntArrayRef(size, 1), x);
  Tensor y = device::contiguous_view(buffer, out_shape);
  char *base = static_cast<char *>(buffer.data_ptr());
  void *h = base + y_elems * buffer.element_size();
  void *workspace = base + (y_elems + m * hidden) * buffer.element_size();
  launch_swapab_gate_up("_geglu_mlp", x, w_gate, w_up, b_gate, b_up, h, hidden, tanh);
  launch_down(kind, x, h, m, hidden, hidden, w_down, b_down, residual, y.data_ptr(), workspace, ws_elems);
  return y;
}

bool fp8_mlp_served(const Tensor &x) { return is_sm90(x); }

// The FP8 decode kernels lead the block-scaled GEMMs at every token count they serve
// (2026-11-27, us: H100 Gemma-7B 97.2 / 103.1 against 123.6 / 123.0 at 1 / 16 tokens,
// Gemma-2B 48.8 / 55.1 against 79.6 / 79.5; H200 71.3 / 77.6 against 112.3 / 104.6;
// docs/DESIGN.md, "The FP8 decode kernels").
constexpr int64_t kFp8DecodeTokens = GEGLU_FP8_DECODE_MAX_M;

Tensor fused_fp8_mlp(const Tensor &x, const Tensor &w_gate, const Tensor &w_gate_scale, const Tensor &w_up,
                     const Tensor &w_up_scale, const Tensor &w_down, const Tensor &w_down_scale,
                     const OptTensor &residual, bool tanh, IntArrayRef out_shape) {
  const char *op = "_geglu_mlp_fp8";
  STD_TORCH_CHECK(is_sm90(x), op, ": no FP8 kernels for this device (compute capability 9.0 only)");
  const int64_t m = x.size(0), k = x.size(1), hidden = w_gate.size(0), n = w_down.size(0);
  const device::DeviceGuard guard(x.get_device_index());
  Tensor y = device::empty(out_shape, x);
  if (m == 0) return y;
  // One allocation for the quantized activations and their scales (rows padded to a
  // multiple of 4, as their TMA loads ask), each part 16-byte aligned: xq [m, k] e4m3, its
  // scales [k/128, ld] float32 (not at up to kFp8DecodeTokens tokens, where the decode
  // gate/up quantizes x itself), hq [m, hidden], its scales [hidden/128, ld]; then the
  // decode kernels' workspace, or the down GEMM's stream-K workspace above.
  const bool decode = m <= kFp8DecodeTokens;
  const int64_t ld = (m + 3) / 4 * 4;
  auto up16 = [](int64_t bytes) { return (bytes + 15) / 16 * 16; };
  const int64_t xq_bytes = decode ? 0 : up16(m * k), sx_bytes = decode ? 0 : up16(k / 128 * ld * 4);
  const int64_t hq_bytes = up16(m * hidden);
  const int64_t sh_bytes = up16(hidden / 128 * ld * 4);
  const int64_t ws_bytes =
      up16(decode ? geglu_fp8_decode_workspace_bytes(m, hidden, n) : geglu_fp8_sm90_workspace_bytes(m, hidden, n));
  const int64_t total = xq_bytes + sx_bytes + hq_bytes + sh_bytes + ws_bytes;
  const int64_t size[1] = {total / static_cast<int64_t>(x.element_size())};
  Tensor buffer = device::empty(IntArrayRef(size, 1), x);
  char *base = static_cast<char *>(buffer.data_ptr());
  void *xq = base;
  float *sx = reinterpret_cast<float *>(base + xq_bytes);
  void *hq = base + xq_bytes + sx_bytes;
  float *sh = reinterpret_cast<float *>(base + xq_bytes + sx_bytes + hq_bytes);
  void *workspace = ws_bytes > 0 ? base + xq_bytes + sx_bytes + hq_bytes + sh_bytes : nullptr;
  void *stream = geglu_cuda::current_stream(x);
  const int dtype = sm90_dtype(x);
  const float *s_gate = static_cast<const float *>(w_gate_scale.data_ptr());
  const float *s_up = static_cast<const float *>(w_up_scale.data_ptr());
  const float *s_down = static_cast<const float *>(w_down_scale.data_ptr());
  if (decode) {
    check_status(op, geglu_fp8_decode_gate_up(x.data_ptr(), k, m, k, w_gate.data_ptr(), s_gate, w_up.data_ptr(),
                                              s_up, hidden, hq, sh, ld, tanh, dtype, workspace, stream));
    check_status(op, geglu_fp8_decode_down(hq, sh, ld, m, hidden, w_down.data_ptr(), s_down, n,
                                           ptr_or_null(residual), y.data_ptr(), dtype, workspace, stream));
    return y;
  }
  check_status(op, geglu_fp8_quantize_rows(x.data_ptr(), k, m, k, dtype, xq, sx, ld, stream));
  check_status(op, geglu_fp8_sm90_gate_up(xq, sx, ld, m, k, w_gate.data_ptr(), s_gate, w_up.data_ptr(), s_up, hidden,
                                          hq, sh, ld, tanh, stream));
  check_status(op, geglu_fp8_sm90_down(hq, sh, ld, m, hidden, w_down.data_ptr(), s_down, n, ptr_or_null(residual),
                                       y.data_ptr(), dtype, workspace, stream));
  return y;
}

Tensor fused_fp8_linear(const Tensor &x, const Tensor &weight, const Tensor &weight_scale, const OptTensor &residual,
                        IntArrayRef out_shape) {
  const char *op = "_fp8_linear";
  STD_TORCH_CHECK(is_sm90(x), op, ": no FP8 kernels for this device (compute capability 9.0 only)");
  const int64_t m = x.size(0), k = x.size(1), n = weight.size(0);
  const device::DeviceGuard guard(x.get_device_index());
  void *stream = geglu_cuda::current_stream(x);
  const int dtype = sm90_dtype(x);
  const float *s_w = static_cast<const float *>(weight_scale.data_ptr());
  if (m <= kFp8DecodeTokens) {
    // One allocation, one launch: y (returned, at offset 0), then from the next 16-byte
    // boundary the decode kernel's split sums.
    const int64_t y_elems = aligned_elems(m * n, x);
    const int64_t ws_elems = workspace_elems(geglu_fp8_decode_linear_workspace_bytes(m, k, n), x);
    const int64_t size[1] = {y_elems + ws_elems};
    Tensor buffer = device::empty(IntArrayRef(size, 1), x);
    Tensor y = device::contiguous_view(buffer, out_shape);
    if (m == 0) return y;
    void *workspace = static_cast<char *>(buffer.data_ptr()) + y_elems * buffer.element_size();
    check_status(op, geglu_fp8_decode_linear(x.data_ptr(), k, m, k, weight.data_ptr(), s_w, n, ptr_or_null(residual),
                                             y.data_ptr(), dtype, workspace, stream));
    return y;
  }
  Tensor y = device::empty(out_shape, x);
  // One allocation, as fused_fp8_mlp's: xq [m, k] e4m3, its scales [k/128, ld] float32,
  // then the stream-K workspace.
  const int64_t ld = (m + 3) / 4 * 4;
  auto up16 = [](int64_t bytes) { return (bytes + 15) / 16 * 16; };
  const int64_t xq_bytes = up16(m * k), sx_bytes = up16(k / 128 * ld * 4);
  const int64_t ws_bytes = up16(geglu_fp8_sm90_workspace_bytes(m, k, n));
  const int64_t size[1] = {(xq_bytes + sx_bytes + ws_bytes) / static_cast<int64_t>(x.element_size())};
  Tensor buffer = device::empty(IntArrayRef(size, 1), x);
  char *base = static_cast<char *>(buffer.data_ptr());
  void *xq = base;
  float *sx = reinterpret_cast<float *>(base + xq_bytes);
  void *workspace = ws_bytes > 0 ? base + xq_bytes + sx_bytes : nullptr;
  check_status(op, geglu_fp8_quantize_rows(x.data_ptr(), k, m, k, dtype, xq, sx, ld, stream));
  check_status(op, geglu_fp8_sm90_down(xq, sx, ld, m, k, weight.data_ptr(), s_w, n, ptr_or_null(residual),
                                       y.data_ptr(), dtype, workspace, stream));
  return y;
}

OptTensor fused_linear_gelu(const Tensor &x, const Tensor &weight, const OptTensor &bias, bool tanh) {
  const int64_t m = x.size(0), k = x.size(1), n = weight.size(0);
  if (!engine_dtype(x)) return std::nullopt;
  if (m <= kLinearGeluMaxCublasTokens || m > kMaxInt32 || k > kMaxInt32 || n > kMaxInt32 || n % 8 != 0) {
    return std::nullopt;
  }
  if (bias.has_value() && !bias->is_contiguous()) return std::nullopt;
  if (!aligned16(x) || !aligned16(weight) || !is_sm90(x)) return std::nullopt;
  const device::DeviceGuard guard(x.get_device_index());
  const int64_t shape[2] = {m, n};
  Tensor out = device::empty(IntArrayRef(shape, 2), x);
  check_status("_linear_bias_gelu",
               linear_gelu_sm90(x.data_ptr(), m, k, x.stride(0), weight.data_ptr(), n, weight.stride(0),
                                ptr_or_null(bias), out.data_ptr(), out.stride(0), sm90_dtype(x), tanh,
                                geglu_cuda::current_stream(x)));
  return out;
}

}  // namespace geglu_stable
