// The CPU backend is built on torch's stable ABI: its ops are registered in
// torch-ext/stable/binding.cpp, and this file only makes the module importable. The
// CUDA backend is version-tied (libtorch's C++ API), registered below.
#if defined(CPU_KERNEL)
#include "registration.h"
#else
#include <torch/library.h>

#include "registration.h"
#include "torch_binding.h"

// The namespace is unique per build (_geglu_<backend>_<tree hash>), so two
// builds of this kernel can be loaded into one process side by side.
TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {
  ops.def("gelu_and_mul(Tensor! out, Tensor input) -> ()");
  ops.def("gelu_tanh_and_mul(Tensor! out, Tensor input) -> ()");
  ops.def("gelu(Tensor! out, Tensor input) -> ()");
  ops.def("gelu_tanh(Tensor! out, Tensor input) -> ()");
  ops.def("geglu(Tensor gate, Tensor up, str approximate) -> Tensor");
  ops.def("geglu_backward(Tensor grad_out, Tensor gate, Tensor up, "
          "str approximate) -> (Tensor, Tensor)");
  ops.def("_geglu_mlp(Tensor x, Tensor w_gate, Tensor? w_up, Tensor w_down, Tensor? b_gate, "
          "Tensor? b_up, Tensor? b_down, Tensor? residual, str approximate) -> Tensor");
  ops.def("_linear_bias_gelu(Tensor x, Tensor weight, Tensor? bias, str approximate) -> Tensor");
  ops.impl("_linear_bias_gelu", c10::DispatchKey::CompositeImplicitAutograd, &linear_bias_gelu);

#if defined(CUDA_KERNEL)
  constexpr auto device = torch::kCUDA;
#else
#error "build exactly one backend: define CUDA_KERNEL or CPU_KERNEL"
#endif
  ops.impl("gelu_and_mul", device, &gelu_and_mul);
  ops.impl("gelu_tanh_and_mul", device, &gelu_tanh_and_mul);
  ops.impl("gelu", device, &gelu);
  ops.impl("gelu_tanh", device, &gelu_tanh);
  ops.impl("geglu", device, &geglu);
  ops.impl("geglu_backward", device, &geglu_backward);
  ops.impl("_geglu_mlp", device, &geglu_mlp);
  ops.impl("_geglu_mlp", c10::DispatchKey::Autograd, &geglu_mlp_autograd);

#if defined(CUDA_KERNEL)
  ops.def("_geglu_linear_sm90(Tensor x, Tensor w_gate, Tensor w_up, Tensor? b_gate, Tensor? b_up, "
          "str approximate) -> Tensor");
  ops.impl("_geglu_linear_sm90", device, &geglu_linear_sm90);
#endif
}
#endif  // CPU_KERNEL

REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
