// The op _geglu_linear_sm90: the Hopper GEMM engine (geglu_gemm_sm90.cu, C ABI) behind
// torch's dispatcher. gelu(x @ w_gate.T + b_gate) * (x @ w_up.T + b_up) as a new
// [M, hidden] tensor, launched on the current stream; inference only (no autograd).
//
// linear.py routes a call here only where the engine serves it (an sm_90 device,
// bfloat16/float16, 16-byte aligned rows); the launcher checks the same rules itself,
// and anything it refuses raises here, naming its reason, rather than computing wrong.

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "common/tensor_checks.h"
#include "geglu_gemm_sm90.h"
#include "torch_binding.h"

namespace {

constexpr const char *kOp = "_geglu_linear_sm90";
constexpr c10::DeviceType kCuda = c10::DeviceType::CUDA;

void check_bias(const char *name, const c10::optional<at::Tensor> &b, const at::Tensor &x, int64_t hidden) {
  if (!b.has_value()) return;
  geglu_checks::check_matches(kOp, name, *b, "x", x, {hidden}, kCuda);
}

}  // namespace

torch::Tensor geglu_linear_sm90(torch::Tensor const &x, torch::Tensor const &w_gate, torch::Tensor const &w_up,
                                c10::optional<torch::Tensor> const &b_gate, c10::optional<torch::Tensor> const &b_up,
                                std::string_view approximate) {
  geglu_checks::check_input(kOp, "x", x, kCuda);
  TORCH_CHECK_VALUE(x.dim() == 2, kOp, ": x must be 2-d [tokens, in_features], got shape ", x.sizes());
  const int64_t m = x.size(0), k = x.size(1), hidden = w_gate.size(0);
  geglu_checks::check_matches(kOp, "w_gate", w_gate, "x", x, {hidden, k}, kCuda);
  geglu_checks::check_matches(kOp, "w_up", w_up, "x", x, {hidden, k}, kCuda);
  TORCH_CHECK_VALUE(w_gate.stride(0) == w_up.stride(0), kOp, ": w_gate and w_up must have one row stride, got ",
                    w_gate.stride(0), " and ", w_up.stride(0));
  check_bias("b_gate", b_gate, x, hidden);
  check_bias("b_up", b_up, x, hidden);
  const bool tanh = geglu_checks::is_tanh(kOp, approximate);
  const auto dtype = x.scalar_type();
  TORCH_CHECK_VALUE(dtype == at::kBFloat16 || dtype == at::kHalf, kOp, ": x must be bfloat16 or float16, got ",
                    geglu_checks::dtype_name(dtype));
  for (const at::Tensor *t : {&x, &w_gate, &w_up}) {
    TORCH_CHECK_VALUE(t->size(1) <= 1 || t->stride(1) == 1, kOp, ": x, w_gate and w_up need unit column stride");
  }
  for (const auto *b : {&b_gate, &b_up}) {
    TORCH_CHECK_VALUE(!b->has_value() || (*b)->is_contiguous(), kOp, ": biases must be contiguous");
  }

  const c10::cuda::CUDAGuard guard(x.device());
  auto out = at::empty({m, hidden}, x.options());
  if (m == 0 || hidden == 0) return out;
  const int status = geglu_gemm_sm90(
      x.data_ptr(), m, k, x.stride(0), w_gate.data_ptr(), w_up.data_ptr(), w_gate.stride(0),
      b_gate.has_value() ? b_gate->data_ptr() : nullptr, b_up.has_value() ? b_up->data_ptr() : nullptr,
      out.data_ptr(), hidden, out.stride(0), dtype == at::kBFloat16 ? GEGLU_SM90_BF16 : GEGLU_SM90_FP16, tanh,
      /*config=*/-1, c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(status == GEGLU_SM90_OK, kOp, ": the sm90 GEMM engine refused the call: ",
              geglu_gemm_sm90_status_string(status));
  return out;
}
