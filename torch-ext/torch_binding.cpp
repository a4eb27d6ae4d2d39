// The native module (torch's stable ABI): the op schemas, the boxed kernels of this
// build's one backend (CPU or CUDA), written here, and the module's import hook.
//
// The kernels are boxed by hand rather than with TORCH_BOX: the stable ABI's
// std::string conversion of torch 2.10-2.13 (stableivalue_conversions.h, ToImpl<std::string>)
// copies the string into a `new std::string` that it never frees, so every call of an
// op with a str argument (approximate) would leak it. `take_str` reads the string handle
// and frees it.

#include <string>
#include <tuple>

#include <torch/csrc/stable/library.h>

#include "registration.h"
#include "torch_binding.h"

#if defined(CPU_KERNEL) == defined(CUDA_KERNEL)
#error "build exactly one backend: define CUDA_KERNEL or CPU_KERNEL"
#endif

namespace {

using geglu_stable::OptTensor;
using geglu_stable::Tensor;
namespace sd = torch::stable::detail;

Tensor take_tensor(StableIValue v) { return sd::to<Tensor>(v); }
OptTensor take_opt(StableIValue v) { return sd::to<OptTensor>(v); }

std::string take_str(StableIValue v) {
  StringHandle h = sd::to<StringHandle>(v);
  size_t length = 0;
  const char *data = nullptr;
  STABLE_TORCH_ERROR_CODE_CHECK(torch_string_length(h, &length));
  STABLE_TORCH_ERROR_CODE_CHECK(torch_string_c_str(h, &data));
  std::string s(data, length);
  STABLE_TORCH_ERROR_CODE_CHECK(torch_delete_string(h));
  return s;
}

// (Tensor(a!) out, Tensor input) -> ()
template <void (*fn)(Tensor &, const Tensor &)>
void boxed_out(StableIValue *stack, uint64_t, uint64_t) {
  Tensor out = take_tensor(stack[0]);
  const Tensor input = take_tensor(stack[1]);
  fn(out, input);
}

void boxed_geglu(StableIValue *stack, uint64_t, uint64_t) {
  const Tensor gate = take_tensor(stack[0]);
  const Tensor up = take_tensor(stack[1]);
  const std::string approximate = take_str(stack[2]);
  stack[0] = sd::from(geglu_stable::geglu(gate, up, approximate));
}

void boxed_geglu_backward(StableIValue *stack, uint64_t, uint64_t) {
  const Tensor grad_out = take_tensor(stack[0]);
  const Tensor gate = take_tensor(stack[1]);
  const Tensor up = take_tensor(stack[2]);
  const std::string approximate = take_str(stack[3]);
  auto [grad_gate, grad_up] = geglu_stable::geglu_backward(grad_out, gate, up, approximate);
  stack[0] = sd::from(grad_gate);
  stack[1] = sd::from(grad_up);
}

// The argument list of _geglu_mlp / _geglu_mlp_train.
struct MlpArgs {
  Tensor x, w_gate;
  OptTensor w_up;
  Tensor w_down;
  OptTensor b_gate, b_up, b_down, residual;
  std::string approximate;

  explicit MlpArgs(StableIValue *s)
      : x(take_tensor(s[0])),
        w_gate(take_tensor(s[1])),
        w_up(take_opt(s[2])),
        w_down(take_tensor(s[3])),
        b_gate(take_opt(s[4])),
        b_up(take_opt(s[5])),
        b_down(take_opt(s[6])),
        residual(take_opt(s[7])),
        approximate(take_str(s[8])) {}
};

void boxed_geglu_mlp(StableIValue *stack, uint64_t, uint64_t) {
  const MlpArgs a(stack);
  stack[0] = sd::from(geglu_stable::geglu_mlp(a.x, a.w_gate, a.w_up, a.w_down, a.b_gate, a.b_up, a.b_down,
                                              a.residual, a.approximate));
}

void boxed_geglu_mlp_train(StableIValue *stack, uint64_t, uint64_t) {
  const MlpArgs a(stack);
  auto [y, pre, h] = geglu_stable::geglu_mlp_train(a.x, a.w_gate, a.w_up, a.w_down, a.b_gate, a.b_up, a.b_down,
                                                   a.residual, a.approximate);
  stack[0] = sd::from(y);
  stack[1] = sd::from(pre);
  stack[2] = sd::from(h);
}

void boxed_geglu_mlp_backward(StableIValue *stack, uint64_t, uint64_t) {
  const Tensor grad = take_tensor(stack[0]);
  const Tensor x = take_tensor(stack[1]);
  const Tensor w_gate = take_tensor(stack[2]);
  const OptTensor w_up = take_opt(stack[3]);
  const Tensor w_down = take_tensor(stack[4]);
  const OptTensor b_gate = take_opt(stack[5]);
  const Tensor pre = take_tensor(stack[6]);
  const Tensor h = take_tensor(stack[7]);
  const int64_t needs = sd::to<int64_t>(stack[8]);
  const std::string approximate = take_str(stack[9]);
  auto grads = geglu_stable::geglu_mlp_backward(grad, x, w_gate, w_up, w_down, b_gate, pre, h, needs, approximate);
  stack[0] = sd::from(std::get<0>(grads));
  stack[1] = sd::from(std::get<1>(grads));
  stack[2] = sd::from(std::get<2>(grads));
  stack[3] = sd::from(std::get<3>(grads));
  stack[4] = sd::from(std::get<4>(grads));
  stack[5] = sd::from(std::get<5>(grads));
  stack[6] = sd::from(std::get<6>(grads));
}

void boxed_linear_bias_gelu(StableIValue *stack, uint64_t, uint64_t) {
  const Tensor x = take_tensor(stack[0]);
  const Tensor weight = take_tensor(stack[1]);
  const OptTensor bias = take_opt(stack[2]);
  const std::string approximate = take_str(stack[3]);
  stack[0] = sd::from(geglu_stable::linear_bias_gelu(x, weight, bias, approximate));
}

void boxed_geglu_linear(StableIValue *stack, uint64_t, uint64_t) {
  const Tensor x = take_tensor(stack[0]);
  const Tensor w_gate = take_tensor(stack[1]);
  const OptTensor w_up = take_opt(stack[2]);
  const OptTensor b_gate = take_opt(stack[3]);
  const OptTensor b_up = take_opt(stack[4]);
  const std::string approximate = take_str(stack[5]);
  stack[0] = sd::from(geglu_stable::geglu_linear(x, w_gate, w_up, b_gate, b_up, approximate));
}

#if defined(CUDA_KERNEL)
void boxed_geglu_mlp_fp8(StableIValue *stack, uint64_t, uint64_t) {
  const Tensor x = take_tensor(stack[0]), w_gate = take_tensor(stack[1]), w_gate_scale = take_tensor(stack[2]);
  const Tensor w_up = take_tensor(stack[3]), w_up_scale = take_tensor(stack[4]);
  const Tensor w_down = take_tensor(stack[5]), w_down_scale = take_tensor(stack[6]);
  const OptTensor residual = take_opt(stack[7]);
  const std::string approximate = take_str(stack[8]);
  stack[0] = sd::from(geglu_stable::geglu_mlp_fp8(x, w_gate, w_gate_scale, w_up, w_up_scale, w_down, w_down_scale,
                                                  residual, approximate));
}

void boxed_geglu_mlp_fp8_serves(StableIValue *stack, uint64_t, uint64_t) {
  stack[0] = sd::from(geglu_stable::geglu_mlp_fp8_serves(take_tensor(stack[0])));
}
#endif

}  // namespace

// The namespace is unique per build (_geglu_<backend>_<tree hash>), so two builds of
// this kernel can be loaded into one process side by side.
STABLE_TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {
  ops.def("gelu_and_mul(Tensor(a!) out, Tensor input) -> ()");
  ops.def("gelu_tanh_and_mul(Tensor(a!) out, Tensor input) -> ()");
  ops.def("gelu(Tensor(a!) out, Tensor input) -> ()");
  ops.def("gelu_tanh(Tensor(a!) out, Tensor input) -> ()");
  ops.def("geglu(Tensor gate, Tensor up, str approximate) -> Tensor");
  ops.def("geglu_backward(Tensor grad_out, Tensor gate, Tensor up, str approximate) -> (Tensor, Tensor)");
  ops.def("_geglu_mlp(Tensor x, Tensor w_gate, Tensor? w_up, Tensor w_down, Tensor? b_gate, "
          "Tensor? b_up, Tensor? b_down, Tensor? residual, str approximate) -> Tensor");
  ops.def("_geglu_mlp_train(Tensor x, Tensor w_gate, Tensor? w_up, Tensor w_down, Tensor? b_gate, "
          "Tensor? b_up, Tensor? b_down, Tensor? residual, str approximate) -> (Tensor, Tensor, Tensor)");
  ops.def("_geglu_mlp_backward(Tensor grad, Tensor x, Tensor w_gate, Tensor? w_up, Tensor w_down, Tensor? b_gate, "
          "Tensor pre, Tensor h, int needs, str approximate) -> (Tensor?, Tensor?, Tensor?, Tensor?, Tensor?, Tensor?, "
          "Tensor?)");
  ops.def("_linear_bias_gelu(Tensor x, Tensor weight, Tensor? bias, str approximate) -> Tensor");
  ops.def("_geglu_linear(Tensor x, Tensor w_gate, Tensor? w_up, Tensor? b_gate, Tensor? b_up, "
          "str approximate) -> Tensor");
#if defined(CUDA_KERNEL)
  ops.def("_geglu_mlp_fp8(Tensor x, Tensor w_gate, Tensor w_gate_scale, Tensor w_up, Tensor w_up_scale, "
          "Tensor w_down, Tensor w_down_scale, Tensor? residual, str approximate) -> Tensor");
  ops.def("_geglu_mlp_fp8_serves(Tensor x) -> bool");
#endif
}

// Backend kernels only: the inference ops (_geglu_mlp, _linear_bias_gelu,
// _geglu_linear) carry no autograd kernel, and linear.py calls them only where no
// gradient is needed; _geglu_mlp_train and _geglu_mlp_backward are joined by linear._GegluMlpTrain.
#if defined(CUDA_KERNEL)
#define GEGLU_BACKEND CUDA
#else
#define GEGLU_BACKEND CPU
#endif

STABLE_TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, GEGLU_BACKEND, ops) {
  ops.impl("gelu_and_mul", &boxed_out<geglu_stable::gelu_and_mul>);
  ops.impl("gelu_tanh_and_mul", &boxed_out<geglu_stable::gelu_tanh_and_mul>);
  ops.impl("gelu", &boxed_out<geglu_stable::gelu>);
  ops.impl("gelu_tanh", &boxed_out<geglu_stable::gelu_tanh>);
  ops.impl("geglu", &boxed_geglu);
  ops.impl("geglu_backward", &boxed_geglu_backward);
  ops.impl("_geglu_mlp", &boxed_geglu_mlp);
  ops.impl("_geglu_mlp_train", &boxed_geglu_mlp_train);
  ops.impl("_geglu_mlp_backward", &boxed_geglu_mlp_backward);
  ops.impl("_linear_bias_gelu", &boxed_linear_bias_gelu);
  ops.impl("_geglu_linear", &boxed_geglu_linear);
#if defined(CUDA_KERNEL)
  ops.impl("_geglu_mlp_fp8", &boxed_geglu_mlp_fp8);
  ops.impl("_geglu_mlp_fp8_serves", &boxed_geglu_mlp_fp8_serves);
#endif
}

REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
