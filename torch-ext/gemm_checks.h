#pragma once
// Argument checks of the per-layer native ops (_geglu_mlp, _linear_bias_gelu), whose
// public Python functions (linear.py) hand their arguments over unchecked: this is the
// only validation such a call gets. The messages are those of the Python checks of the
// other routes (torch-ext/geglu/_checks.py: the same words, shapes written as Python
// tuples), so an error reads the same whichever route the call took; tests run every
// bad call through both.
//
// Every failure raises ValueError (TORCH_CHECK_VALUE).

#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>

namespace gemm_checks {

// "(24,)", "(4, 40)": a shape as Python prints a tuple.
inline std::string py_shape(at::IntArrayRef s) {
  std::ostringstream o;
  o << "(";
  for (size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
  o << (s.size() == 1 ? ",)" : ")");
  return o.str();
}

// "torch.float32", "torch.int64": a dtype as Python prints it (torch's own names, as
// geglu_kernels/common/tensor_checks.h spells them).
inline std::string py_dtype(at::ScalarType t) { return "torch." + std::string(c10::getDtypeNames(t).first); }

// x: a dense float tensor with at least one dimension.
inline void check_x(const at::Tensor &x) {
  const at::ScalarType s = x.scalar_type();
  TORCH_CHECK_VALUE(s == at::kFloat || s == at::kHalf || s == at::kBFloat16,
                    "x must have dtype float32/float16/bfloat16, got ", py_dtype(s));
  TORCH_CHECK_VALUE(x.dim() >= 1, "x must have at least 1 dimension(s), got a 0-d tensor");
  TORCH_CHECK_VALUE(x.layout() == at::kStrided, "x must be a dense (strided) tensor, got layout ", x.layout());
}

// `t` has x's dtype and device (and is dense).
inline void check_like_x(const char *name, const at::Tensor &t, const at::Tensor &x) {
  TORCH_CHECK_VALUE(t.scalar_type() == x.scalar_type(), name, " must have the dtype of x (", py_dtype(x.scalar_type()),
                    "), got ", py_dtype(t.scalar_type()));
  TORCH_CHECK_VALUE(t.device() == x.device(), name, " must be on the device of x (", x.device(), "), got ",
                    t.device());
  TORCH_CHECK_VALUE(t.layout() == at::kStrided, name, " must be a dense (strided) tensor, got layout ", t.layout());
}

// A 2-d [out_features, in_features] weight (nn.Linear layout) with x's dtype and device.
inline void check_linear_operand(const char *name, const at::Tensor &w, const at::Tensor &x, int64_t in_features) {
  check_like_x(name, w, x);
  TORCH_CHECK_VALUE(w.dim() == 2 && w.size(1) == in_features, name, " must be a 2-d [out_features, ", in_features,
                    "] weight (nn.Linear layout, in_features = the last dim of its input), got shape ",
                    py_shape(w.sizes()));
}

inline void check_shape(const char *name, const at::Tensor &t, at::IntArrayRef shape) {
  TORCH_CHECK_VALUE(t.sizes() == shape, name, " must have shape ", py_shape(shape), ", got ", py_shape(t.sizes()));
}

// An optional operand (a bias, a residual) of `shape` with x's dtype and device.
inline void check_optional(const char *name, const c10::optional<at::Tensor> &t, const at::Tensor &x,
                           at::IntArrayRef shape) {
  if (!t.has_value()) return;
  check_like_x(name, *t, x);
  check_shape(name, *t, shape);
}

// approximate="tanh" (true) or "none" (false).
inline bool is_tanh(std::string_view approximate) {
  if (approximate == "tanh") return true;
  TORCH_CHECK_VALUE(approximate == "none", "approximate must be one of ('tanh', 'none'), got '", approximate, "'");
  return false;
}

// The gate/up operands of a GeGLU GEMM; returns hidden. w_up absent: w_gate is a merged
// [2*hidden, in] weight (gate rows first) whose bias is merged ([2*hidden] b_gate, no
// b_up) or split.
inline int64_t check_gate_up(const at::Tensor &x, const at::Tensor &w_gate, const c10::optional<at::Tensor> &w_up,
                             const c10::optional<at::Tensor> &b_gate, const c10::optional<at::Tensor> &b_up) {
  const int64_t k = x.size(-1);
  check_linear_operand("w_gate", w_gate, x, k);
  int64_t hidden = w_gate.size(0);
  if (!w_up.has_value()) {
    TORCH_CHECK_VALUE(hidden % 2 == 0,
                      "w_gate must have an even number of rows when w_up is None (a merged [2*hidden, in] gate/up "
                      "weight, gate rows first), got shape ",
                      py_shape(w_gate.sizes()));
    hidden /= 2;
    if (b_gate.has_value() && !b_up.has_value() && b_gate->dim() == 1 && b_gate->size(0) == 2 * hidden) {
      check_optional("b_gate", b_gate, x, {2 * hidden});  // merged bias
      return hidden;
    }
  } else {
    check_linear_operand("w_up", *w_up, x, k);
    check_shape("w_up", *w_up, w_gate.sizes());
  }
  check_optional("b_gate", b_gate, x, {hidden});
  check_optional("b_up", b_up, x, {hidden});
  return hidden;
}

}  // namespace gemm_checks
