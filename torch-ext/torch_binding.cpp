// The native module (torch's stable ABI): the op schemas, the boxed kernels of this
// build's one backend (CPU or CUDA), written here, and the module's import hook.
//
// The kernels are boxed here (Boxed, boxed_out) rather than with TORCH_BOX: the stable ABI's
// std::string conversion of torch 2.10-2.13 (stableivalue_conversions.h, ToImpl<std::string>)
// copies the string into a `new std::string` that it never frees, so every call of an
// op with a str argument (approximate) would leak it. `take_str` reads the string handle
// and frees it.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

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

// One argument of a schema (Tensor, Tensor?, int, str) read off the stack as the
// parameter type of the C++ op takes it.
template <class T>
struct Take;
template <>
struct Take<Tensor> {
  static Tensor from(StableIValue v) { return take_tensor(v); }
};
template <>
struct Take<OptTensor> {
  static OptTensor from(StableIValue v) { return take_opt(v); }
};
template <>
struct Take<int64_t> {
  static int64_t from(StableIValue v) { return sd::to<int64_t>(v); }
};
template <>
struct Take<std::string_view> {
  // An owning string: the call's argument views it until the call returns.
  static std::string from(StableIValue v) { return take_str(v); }
};

// An op's results back onto the stack from slot 0: one value, or a tuple's elements in order.
template <class R>
void put_results(StableIValue *stack, R const &r) {
  stack[0] = sd::from(r);
}
template <class... R>
void put_results(StableIValue *stack, std::tuple<R...> const &r) {
  std::apply([stack](R const &...v) {
    size_t i = 0;
    ((stack[i++] = sd::from(v)), ...);
  }, r);
}

// The boxed kernel of a C++ op `fn`: its arguments read off stack[0..n) in schema order
// (all of them before the call), its results written back from stack[0].
template <class Fn, Fn fn>
struct Boxed;
template <class R, class... Args, R (*fn)(Args...)>
struct Boxed<R (*)(Args...), fn> {
  static void call(StableIValue *stack, uint64_t, uint64_t) { call_with(stack, std::index_sequence_for<Args...>{}); }

 private:
  template <size_t... I>
  static void call_with(StableIValue *stack, std::index_sequence<I...>) {
    put_results(stack, fn(Take<std::decay_t<Args>>::from(stack[I])...));
  }
};

template <auto fn>
constexpr auto boxed = &Boxed<decltype(fn), fn>::call;

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
  ops.def("_fp8_linear(Tensor x, Tensor weight, Tensor weight_scale, Tensor? residual) -> Tensor");
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
  ops.impl("geglu", boxed<&geglu_stable::geglu>);
  ops.impl("geglu_backward", boxed<&geglu_stable::geglu_backward>);
  ops.impl("_geglu_mlp", boxed<&geglu_stable::geglu_mlp>);
  ops.impl("_geglu_mlp_train", boxed<&geglu_stable::geglu_mlp_train>);
  ops.impl("_geglu_mlp_backward", boxed<&geglu_stable::geglu_mlp_backward>);
  ops.impl("_linear_bias_gelu", boxed<&geglu_stable::linear_bias_gelu>);
  ops.impl("_geglu_linear", boxed<&geglu_stable::geglu_linear>);
#if defined(CUDA_KERNEL)
  ops.impl("_geglu_mlp_fp8", boxed<&geglu_stable::geglu_mlp_fp8>);
  ops.impl("_geglu_mlp_fp8_serves", boxed<&geglu_stable::geglu_mlp_fp8_serves>);
  ops.impl("_fp8_linear", boxed<&geglu_stable::fp8_linear>);
#endif
}

REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
