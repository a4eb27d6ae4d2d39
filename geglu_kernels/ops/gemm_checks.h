#pragma once
// Argument checks of the per-layer ops (_geglu_mlp, _geglu_mlp_train, _linear_bias_gelu)
// built on torch's stable ABI, with the messages of the Python checks of the other routes
// (torch-ext/geglu/_checks.py: the same words, shapes written as Python tuples), so an
// error reads the same whichever route the call took.
//
// Every failure throws std::invalid_argument: a ValueError in Python.

#include <cstdint>
#include <optional>
#include <string_view>

#include "common/tensor_checks.h"

namespace geglu_stable::gemm_checks {

using OptTensor = std::optional<Tensor>;

// x: a dense float tensor with at least one dimension.
inline void check_x(const Tensor &x) {
  const ScalarType s = x.scalar_type();
  GEGLU_CHECK_VALUE(s == ScalarType::Float || s == ScalarType::Half || s == ScalarType::BFloat16,
                    "x must have dtype float32/float16/bfloat16, got ", dtype_name(s));
  GEGLU_CHECK_VALUE(x.dim() >= 1, "x must have at least 1 dimension(s), got a 0-d tensor");
  GEGLU_CHECK_VALUE(x.layout() == torch::headeronly::Layout::Strided,
                    "x must be a dense (strided) tensor, got layout ", layout_name(x.layout()));
}

// `t` has x's dtype and device (and is dense).
inline void check_like_x(const char *name, const Tensor &t, const Tensor &x) {
  GEGLU_CHECK_VALUE(t.scalar_type() == x.scalar_type(), name, " must have the dtype of x (",
                    dtype_name(x.scalar_type()), "), got ", dtype_name(t.scalar_type()));
  GEGLU_CHECK_VALUE(same_device(t, x), name, " must be on the device of x (", device_name(x.device()), "), got ",
                    device_name(t.device()));
  GEGLU_CHECK_VALUE(t.layout() == torch::headeronly::Layout::Strided, name,
                    " must be a dense (strided) tensor, got layout ", layout_name(t.layout()));
}

// A 2-d [out_features, in_features] weight (nn.Linear layout) with x's dtype and device.
inline void check_linear_operand(const char *name, const Tensor &w, const Tensor &x, int64_t in_features) {
  check_like_x(name, w, x);
  GEGLU_CHECK_VALUE(w.dim() == 2 && w.size(1) == in_features, name, " must be a 2-d [out_features, ", in_features,
                    "] weight (nn.Linear layout, in_features = the last dim of its input), got shape ",
                    py_shape(w.sizes()));
}

inline void check_shape(const char *name, const Tensor &t, IntArrayRef shape) {
  GEGLU_CHECK_VALUE(same_shape(t.sizes(), shape), name, " must have shape ", py_shape(shape), ", got ",
                    py_shape(t.sizes()));
}

// An optional operand (a bias, a residual) of `shape` with x's dtype and device.
inline void check_optional(const char *name, const OptTensor &t, const Tensor &x, IntArrayRef shape) {
  if (!t.has_value()) return;
  check_like_x(name, *t, x);
  check_shape(name, *t, shape);
}

// approximate="tanh" (true) or "none" (false).
inline bool is_tanh(std::string_view approximate) {
  if (approximate == "tanh") return true;
  GEGLU_CHECK_VALUE(approximate == "none", "approximate must be one of ('tanh', 'none'), got '", approximate, "'");
  return false;
}

// The gate/up operands of a GeGLU GEMM; returns hidden. w_up absent: w_gate is a merged
// [2*hidden, in] weight (gate rows first) whose bias is merged ([2*hidden] b_gate, no
// b_up) or split.
inline int64_t check_gate_up(const Tensor &x, const Tensor &w_gate, const OptTensor &w_up, const OptTensor &b_gate,
                             const OptTensor &b_up) {
  const int64_t k = x.size(-1);
  check_linear_operand("w_gate", w_gate, x, k);
  int64_t hidden = w_gate.size(0);
  if (!w_up.has_value()) {
    GEGLU_CHECK_VALUE(hidden % 2 == 0,
                      "w_gate must have an even number of rows when w_up is None (a merged [2*hidden, in] gate/up "
                      "weight, gate rows first), got shape ",
                      py_shape(w_gate.sizes()));
    hidden /= 2;
    if (b_gate.has_value() && !b_up.has_value() && b_gate->dim() == 1 && b_gate->size(0) == 2 * hidden) {
      const int64_t merged[1] = {2 * hidden};
      check_optional("b_gate", b_gate, x, IntArrayRef(merged, 1));  // merged bias
      return hidden;
    }
  } else {
    check_linear_operand("w_up", *w_up, x, k);
    check_shape("w_up", *w_up, w_gate.sizes());
  }
  const int64_t h[1] = {hidden};
  check_optional("b_gate", b_gate, x, IntArrayRef(h, 1));
  check_optional("b_up", b_up, x, IntArrayRef(h, 1));
  return hidden;
}

}  // namespace geglu_stable::gemm_checks
