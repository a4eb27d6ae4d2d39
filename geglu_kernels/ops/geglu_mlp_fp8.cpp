// _geglu_mlp_fp8, _fp8_linear and _geglu_mlp_fp8_serves on torch's stable ABI: the
// block-scaled FP8 GeGLU MLP, and one block-scaled FP8 linear on the same engine, each as
// one native call (CUDA builds).
//
//   y = q(gelu(q(x) @ deq(w_gate).T) * (q(x) @ deq(w_up).T)) @ deq(w_down).T + residual
//
// q(): per row and 128-column group, scale = amax / 448 (1 for an all-zero group), e4m3
// values rounded to nearest even; deq(w): e4m3 weight times its float32 scale per
// 128x128 block (Transformers' `weight_scale_inv`). On this route the checks here are the
// call's validation (torch-ext/geglu/fp8_mlp.py checks only that no gradient is needed
// first): each failure is a std::invalid_argument (a ValueError) whose message starts with
// the argument's name, as the Python checks' do.
//
// The backend decides where its kernels serve (fp8_mlp_served: the sm_90 engine);
// _geglu_mlp_fp8_serves reports it for a tensor's device, so the Python function takes
// its composite of torch ops everywhere else.

#include <cstdint>
#include <string>
#include <vector>

#include "ops/aten.h"
#include "ops/gemm_checks.h"
#include "ops/layer_ops.h"

namespace geglu_stable {
namespace {

using gemm_checks::OptTensor;

void check_fp8_weight(const char *name, const char *scale_name, const Tensor &w, const Tensor &s, const Tensor &x,
                      int64_t rows, int64_t cols) {
  GEGLU_CHECK_VALUE(w.scalar_type() == ScalarType::Float8_e4m3fn, name, " must have dtype float8_e4m3fn, got ",
                    dtype_name(w.scalar_type()));
  GEGLU_CHECK_VALUE(same_device(w, x), name, " must be on the device of x (", device_name(x.device()), "), got ",
                    device_name(w.device()));
  const int64_t ws[2] = {rows, cols};
  gemm_checks::check_shape(name, w, IntArrayRef(ws, 2));
  GEGLU_CHECK_VALUE(w.is_contiguous(), name, " must be contiguous");
  GEGLU_CHECK_VALUE(s.scalar_type() == ScalarType::Float, scale_name, " must have dtype float32, got ",
                    dtype_name(s.scalar_type()));
  GEGLU_CHECK_VALUE(same_device(s, x), scale_name, " must be on the device of x (", device_name(x.device()),
                    "), got ", device_name(s.device()));
  const int64_t ss[2] = {rows / 128, cols / 128};
  gemm_checks::check_shape(scale_name, s, IntArrayRef(ss, 2));
  GEGLU_CHECK_VALUE(s.is_contiguous(), scale_name, " must be contiguous");
}

// x of an FP8 op: float16/bfloat16, contiguous, its last dimension (returned) a positive
// multiple of 128.
int64_t check_activation(const Tensor &x) {
  const ScalarType xt = x.scalar_type();
  GEGLU_CHECK_VALUE(xt == ScalarType::Half || xt == ScalarType::BFloat16,
                    "x must have dtype float16/bfloat16, got ", dtype_name(xt));
  GEGLU_CHECK_VALUE(x.dim() >= 1 && x.layout() == torch::headeronly::Layout::Strided && x.is_contiguous(),
                    "x must be a contiguous tensor with at least 1 dimension");
  const int64_t k = x.size(-1);
  GEGLU_CHECK_VALUE(k % 128 == 0 && k > 0, "x's last dimension must be a positive multiple of 128, got ", k);
  return k;
}

// x's shape with the last dimension n: the output's.
std::vector<int64_t> output_shape(const Tensor &x, int64_t n) {
  const IntArrayRef xs = x.sizes();
  std::vector<int64_t> shape(xs.begin(), xs.end());
  shape.back() = n;
  return shape;
}

// x as [m, k] rows and the residual as [m, n], views of the (checked) contiguous tensors.
struct Rows {
  Tensor x;
  OptTensor residual;
};
Rows as_rows(const Tensor &x, const OptTensor &residual, int64_t k, int64_t n) {
  const int64_t m = x.numel() / k;
  const int64_t rows[2] = {m, k};
  const int64_t out_rows[2] = {m, n};
  Rows r{device::contiguous_view(x, IntArrayRef(rows, 2)), std::nullopt};
  if (residual.has_value()) r.residual = device::contiguous_view(*residual, IntArrayRef(out_rows, 2));
  return r;
}

}  // namespace

Tensor geglu_mlp_fp8(const Tensor &x, const Tensor &w_gate, const Tensor &w_gate_scale, const Tensor &w_up,
                     const Tensor &w_up_scale, const Tensor &w_down, const Tensor &w_down_scale,
                     const OptTensor &residual, std::string_view approximate) {
  const int64_t k = check_activation(x);
  const int64_t hidden = w_gate.dim() == 2 ? w_gate.size(0) : -1;
  const int64_t n = w_down.dim() == 2 ? w_down.size(0) : -1;
  GEGLU_CHECK_VALUE(hidden % 128 == 0 && hidden > 0,
                    "w_gate must be a 2-d [hidden, in] weight with hidden a positive multiple of 128, got shape ",
                    py_shape(w_gate.sizes()));
  GEGLU_CHECK_VALUE(n % 128 == 0 && n > 0,
                    "w_down must be a 2-d [out, hidden] weight with out a positive multiple of 128, got shape ",
                    py_shape(w_down.sizes()));
  check_fp8_weight("w_gate", "w_gate_scale", w_gate, w_gate_scale, x, hidden, k);
  check_fp8_weight("w_up", "w_up_scale", w_up, w_up_scale, x, hidden, k);
  check_fp8_weight("w_down", "w_down_scale", w_down, w_down_scale, x, n, hidden);
  // The kernels' loads of x: 16-byte words (geglu_mlp_fp8 copies a view that is not aligned).
  GEGLU_CHECK_VALUE(reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0, "x must be 16-byte aligned");
  const std::vector<int64_t> out_shape = output_shape(x, n);
  gemm_checks::check_optional("residual", residual, x, out_shape);
  GEGLU_CHECK_VALUE(!residual.has_value() || residual->is_contiguous(), "residual must be contiguous");
  const bool tanh = gemm_checks::is_tanh(approximate);

  device::DeviceGuard guard(x.get_device_index());
  const Rows r = as_rows(x, residual, k, n);
  return fused_fp8_mlp(r.x, w_gate, w_gate_scale, w_up, w_up_scale, w_down, w_down_scale, r.residual, tanh,
                       out_shape);
}

Tensor fp8_linear(const Tensor &x, const Tensor &weight, const Tensor &weight_scale, const OptTensor &residual) {
  const int64_t k = check_activation(x);
  const int64_t n = weight.dim() == 2 ? weight.size(0) : -1;
  GEGLU_CHECK_VALUE(n % 128 == 0 && n > 0,
                    "weight must be a 2-d [out, in] weight with out a positive multiple of 128, got shape ",
                    py_shape(weight.sizes()));
  check_fp8_weight("weight", "weight_scale_inv", weight, weight_scale, x, n, k);
  // The kernels' TMA loads: 16-byte aligned operands (fp8_linear copies a view that is not).
  GEGLU_CHECK_VALUE(reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0, "x must be 16-byte aligned");
  GEGLU_CHECK_VALUE(reinterpret_cast<uintptr_t>(weight.data_ptr()) % 16 == 0, "weight must be 16-byte aligned");
  const std::vector<int64_t> out_shape = output_shape(x, n);
  gemm_checks::check_optional("residual", residual, x, out_shape);
  GEGLU_CHECK_VALUE(!residual.has_value() || (residual->is_contiguous() &&
                                              reinterpret_cast<uintptr_t>(residual->data_ptr()) % 16 == 0),
                    "residual must be contiguous and 16-byte aligned");

  device::DeviceGuard guard(x.get_device_index());
  const Rows r = as_rows(x, residual, k, n);
  return fused_fp8_linear(r.x, weight, weight_scale, r.residual, out_shape);
}

bool geglu_mlp_fp8_serves(const Tensor &x) { return fp8_mlp_served(x); }

}  // namespace geglu_stable
