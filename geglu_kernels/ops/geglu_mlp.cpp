// _geglu_mlp, _geglu_mlp_train, _geglu_mlp_backward and _geglu_linear on torch's stable
// ABI: the GeGLU MLP as one native call each way, the op every MLP layer forward runs,
// and its gate/up half alone (geglu_linear's inference op), by the same route.
//
//   y = (gelu(x @ w_gate.T + b_gate) * (x @ w_up.T + b_up)) @ w_down.T + b_down + residual
//
// One dispatcher call does the argument checks (gemm_checks.h: the only validation the
// call gets), picks the kernels and launches them, with no Python between them; the
// GEMMs go straight to the device's kernels through AOTInductor's C shim (aten.h).
//
// _geglu_mlp (inference): both GEMMs from the backend with h and y in one allocation
// where it has kernels for both (fused_small_batch_mlp: on sm_90 at 1-32 tokens); else
// the gate/up GEMM with the GeGLU fused in where the backend has a kernel for the call
// (fused_gate_up), else torch's GEMM writing [gate | up] and the geglu kernel; then the
// down GEMM with b_down and the residual in it, the backend's where it has one
// (fused_down), else torch's.
//
// _geglu_mlp_train (training): the same forward, returning also what backward needs:
// the pre-activations [gate | up] ([M, 2*hidden]) and h = gelu(gate) * up ([M, hidden]),
// 3*M*hidden elements against eager autograd's 4. The stable ABI has no autograd: the
// autograd node is a Python Function (`_GegluMlpTrain`, torch-ext/geglu/linear.py)
// whose backward is _geglu_mlp_backward, and linear.py calls it only where a gradient
// is needed: _geglu_mlp carries no autograd kernel, which would cost every inference
// call its Python.
//
// x is [..., K]; w_up absent: w_gate is a merged [2*hidden, K] gate/up weight (gate rows
// first), and its bias either merged (b_gate of 2*hidden, b_up absent) or split.

#include <optional>
#include <string>
#include <vector>

#include "ops/aten.h"
#include "ops/gemm_checks.h"
#include "ops/layer_ops.h"

namespace geglu_stable {
namespace {

// [gate | up] pre-activations as one [M, 2*hidden] tensor.
Tensor gate_up(const Tensor &x, const Tensor &w_gate, const OptTensor &w_up, const OptTensor &b_gate,
               const OptTensor &b_up) {
  if (!w_up.has_value()) {  // merged weight: one GEMM
    const int64_t hidden = w_gate.size(0) / 2;
    OptTensor bias = b_gate;
    if (b_up.has_value() || (b_gate.has_value() && b_gate->size(0) == hidden)) {
      const Tensor &ref = b_up.has_value() ? *b_up : *b_gate;
      bias = aten::cat0(b_gate.has_value() ? *b_gate : aten::zeros_like(ref),
                        b_up.has_value() ? *b_up : aten::zeros_like(ref));
    }
    return device::linear(x, w_gate, bias);
  }
  // Two GEMMs writing the column halves in place (the row stride is the GEMM's ldc).
  const int64_t hidden = w_gate.size(0);
  const int64_t shape[2] = {x.size(0), 2 * hidden};
  Tensor pre = device::empty(IntArrayRef(shape, 2), x);
  const Tensor *w[2] = {&w_gate, &*w_up};
  const OptTensor *b[2] = {&b_gate, &b_up};
  for (int i = 0; i < 2; ++i) {
    Tensor cols = device::narrow(pre, 1, i * hidden, hidden);
    if (b[i]->has_value()) {
      device::addmm_out(cols, **b[i], x, device::t(*w[i]));
    } else {
      device::mm_out(cols, x, device::t(*w[i]));
    }
  }
  return pre;
}

// h @ w_down.T + b_down + residual: the backend's kernel where it has one for the call
// (fused_down), else torch's GEMM with the residual as addmm's beta=1 input where there
// is no b_down, or the bias in the GEMM and one add.
Tensor down(const Tensor &h, const Tensor &w_down, const OptTensor &b_down, const OptTensor &residual) {
  if (OptTensor y = fused_down(h, w_down, b_down, residual)) return *y;
  if (!b_down.has_value()) return device::linear(h, w_down, residual);
  Tensor y = device::linear(h, w_down, b_down);
  return residual.has_value() ? device::add(y, *residual) : y;
}

// t [..., n] as [rows, n]: a view where the leading dimensions collapse, else a copy.
Tensor as_rows(const Tensor &t) {
  if (OptTensor v = device::rows_view(t)) return *v;
  const int64_t shape[2] = {-1, t.size(-1)};
  return aten::reshape(t, IntArrayRef(shape, 2));
}

// The problem of one call, checked, with x and the residual as [M, K] / [M, N] views.
struct Problem {
  Tensor x;
  OptTensor residual;
  std::vector<int64_t> out_shape;  // [..., N]
  bool tanh;
};

Problem check_and_flatten(const Tensor &x, const Tensor &w_gate, const OptTensor &w_up, const Tensor &w_down,
                          const OptTensor &b_gate, const OptTensor &b_up, const OptTensor &b_down,
                          const OptTensor &residual, std::string_view approximate) {
  gemm_checks::check_x(x);
  const int64_t hidden = gemm_checks::check_gate_up(x, w_gate, w_up, b_gate, b_up);
  gemm_checks::check_linear_operand("w_down", w_down, x, hidden);
  const int64_t n = w_down.size(0);
  const int64_t ns[1] = {n};
  gemm_checks::check_optional("b_down", b_down, x, IntArrayRef(ns, 1));
  const IntArrayRef xs = x.sizes();
  std::vector<int64_t> out_shape(xs.begin(), xs.end());
  out_shape.back() = n;
  gemm_checks::check_optional("residual", residual, x, out_shape);
  const bool tanh = gemm_checks::is_tanh(approximate);
  if (x.dim() == 2) return {x, residual, std::move(out_shape), tanh};
  OptTensor res;
  if (residual.has_value()) res = as_rows(*residual);
  return {as_rows(x), res, std::move(out_shape), tanh};
}

Tensor geglu_halves(const Tensor &pre, std::string_view approximate) {
  const int64_t hidden = pre.size(1) / 2;
  return geglu(device::narrow(pre, 1, 0, hidden), device::narrow(pre, 1, hidden, hidden), approximate);
}

Tensor restore_shape(const Tensor &y, const Problem &p) {
  return p.x.dim() == static_cast<int64_t>(p.out_shape.size()) ? y : device::contiguous_view(y, p.out_shape);
}

// The gate/up operands as the fused kernels read them: separate [hidden, K] weights and
// [hidden] biases, views of a merged weight (and bias), read in place.
struct SplitGateUp {
  Tensor w_gate, w_up;
  OptTensor b_gate, b_up;
};

SplitGateUp split_gate_up(const Tensor &w_gate, const OptTensor &w_up, const OptTensor &b_gate, const OptTensor &b_up) {
  if (w_up.has_value()) return {w_gate, *w_up, b_gate, b_up};
  const int64_t hidden = w_gate.size(0) / 2;
  SplitGateUp s{device::narrow(w_gate, 0, 0, hidden), device::narrow(w_gate, 0, hidden, hidden), b_gate, b_up};
  if (b_gate.has_value() && !b_up.has_value() && b_gate->size(0) == 2 * hidden) {
    s.b_gate = device::narrow(*b_gate, 0, 0, hidden);
    s.b_up = device::narrow(*b_gate, 0, hidden, hidden);
  }
  return s;
}

// The operands the backend's fused kernels get to see: where it has some and the problem
// is not empty (the kernels take M, K, hidden > 0), the split gate/up; else none.
std::optional<SplitGateUp> fused_operands(const Tensor &x2, const Tensor &w_gate, const OptTensor &w_up,
                                          const OptTensor &b_gate, const OptTensor &b_up) {
  if (!kHasFusedGateUp || x2.size(0) == 0 || x2.size(1) == 0 || w_gate.size(0) == 0) return std::nullopt;
  return split_gate_up(w_gate, w_up, b_gate, b_up);
}

// h = gelu(x @ w_gate.T + b_gate) * (x @ w_up.T + b_up) for x [M, K]: the backend's fused
// gate/up GEMM where it has one for the call (fused_gate_up on `fused`, fused_operands'
// result), else torch's GEMM writing [gate | up] and the geglu kernel on its halves. The
// one gate/up route of _geglu_mlp and _geglu_linear.
Tensor gate_up_geglu(const Tensor &x2, const Tensor &w_gate, const OptTensor &w_up, const OptTensor &b_gate,
                     const OptTensor &b_up, const std::optional<SplitGateUp> &fused, bool tanh,
                     std::string_view approximate) {
  if (fused.has_value()) {
    if (OptTensor h = fused_gate_up(x2, fused->w_gate, fused->w_up, fused->b_gate, fused->b_up, tanh)) return *h;
  }
  return geglu_halves(gate_up(x2, w_gate, w_up, b_gate, b_up), approximate);
}

}  // namespace

Tensor geglu_mlp(const Tensor &x, const Tensor &w_gate, const OptTensor &w_up, const Tensor &w_down,
                 const OptTensor &b_gate, const OptTensor &b_up, const OptTensor &b_down, const OptTensor &residual,
                 std::string_view approximate) {
  const Problem p = check_and_flatten(x, w_gate, w_up, w_down, b_gate, b_up, b_down, residual, approximate);
  const device::DeviceGuard guard(x.get_device_index());
  const std::optional<SplitGateUp> fused = fused_operands(p.x, w_gate, w_up, b_gate, b_up);
  if (fused.has_value()) {
    const IntArrayRef out_shape(p.out_shape.data(), p.out_shape.size());
    if (OptTensor y = fused_small_batch_mlp(p.x, fused->w_gate, fused->w_up, fused->b_gate, fused->b_up, w_down, b_down,
                                            p.residual, p.tanh, out_shape)) {
      return *y;
    }
  }
  const Tensor h = gate_up_geglu(p.x, w_gate, w_up, b_gate, b_up, fused, p.tanh, approximate);
  return restore_shape(down(h, w_down, b_down, p.residual), p);
}

Tensor geglu_linear(const Tensor &x, const Tensor &w_gate, const OptTensor &w_up, const OptTensor &b_gate,
                    const OptTensor &b_up, std::string_view approximate) {
  gemm_checks::check_x(x);
  const int64_t hidden = gemm_checks::check_gate_up(x, w_gate, w_up, b_gate, b_up);
  const bool tanh = gemm_checks::is_tanh(approximate);
  const device::DeviceGuard guard(x.get_device_index());
  const Tensor x2 = x.dim() == 2 ? x : as_rows(x);
  const Tensor h = gate_up_geglu(x2, w_gate, w_up, b_gate, b_up, fused_operands(x2, w_gate, w_up, b_gate, b_up), tanh,
                                 approximate);
  if (x.dim() == 2) return h;
  const IntArrayRef xs = x.sizes();
  std::vector<int64_t> out_shape(xs.begin(), xs.end());
  out_shape.back() = hidden;
  return device::contiguous_view(h, out_shape);
}

std::tuple<Tensor, Tensor, Tensor> geglu_mlp_train(const Tensor &x, const Tensor &w_gate, const OptTensor &w_up,
                                                   const Tensor &w_down, const OptTensor &b_gate,
                                                   const OptTensor &b_up, const OptTensor &b_down,
                                                   const OptTensor &residual, std::string_view approximate) {
  const Problem p = check_and_flatten(x, w_gate, w_up, w_down, b_gate, b_up, b_down, residual, approximate);
  const device::DeviceGuard guard(x.get_device_index());
  Tensor pre = gate_up(p.x, w_gate, w_up, b_gate, b_up);
  Tensor h = geglu_halves(pre, approximate);
  Tensor y = restore_shape(down(h, w_down, b_down, p.residual), p);
  return {y, pre, h};
}

// The backward of _geglu_mlp_train (what the deleted version-tied C++ node ran, as one native
// call): `needs` bit i asks for the gradient of input i (x, w_gate, w_up, w_down, b_gate,
// b_up, b_down); the residual's gradient is grad itself (Python). grad is [M, N]
// (contiguous), x [M, K]; pre / h are the forward's [gate | up] and h.
std::tuple<OptTensor, OptTensor, OptTensor, OptTensor, OptTensor, OptTensor, OptTensor> geglu_mlp_backward(
    const Tensor &grad, const Tensor &x, const Tensor &w_gate, const OptTensor &w_up, const Tensor &w_down,
    const OptTensor &b_gate, const Tensor &pre, const Tensor &h, int64_t needs, std::string_view approximate) {
  const device::DeviceGuard guard(x.get_device_index());
  auto need = [&](int i) { return ((needs >> i) & 1) != 0; };
  OptTensor dx, dwg, dwu, dwd, dbg, dbu, dbd;
  const int64_t hidden = w_down.size(1);
  if (need(0) || need(1) || need(2) || need(4) || need(5)) {
    const Tensor dh = device::linear(grad, device::t(w_down), std::nullopt);  // grad @ w_down
    auto [d_gate, d_up] = geglu_backward(dh, device::narrow(pre, 1, 0, hidden), device::narrow(pre, 1, hidden, hidden),
                                         approximate);
    const bool merged = !w_up.has_value();
    const Tensor wg = merged ? device::narrow(w_gate, 0, 0, hidden) : w_gate;
    const Tensor wu = merged ? device::narrow(w_gate, 0, hidden, hidden) : *w_up;
    if (need(0)) {  // d_gate @ wg + d_up @ wu, the second GEMM accumulating in place
      Tensor out = device::linear(d_gate, device::t(wg), std::nullopt);
      device::addmm_out(out, out, d_up, wu);
      dx = out;
    }
    const Tensor xt = device::t(x);
    if (need(1)) {
      const int64_t rows = merged ? 2 * hidden : hidden;
      const int64_t shape[2] = {rows, x.size(1)};
      Tensor out = device::empty(IntArrayRef(shape, 2), x);
      Tensor top = device::narrow(out, 0, 0, hidden);
      device::mm_out(top, device::t(d_gate), x);
      if (merged) {
        Tensor bottom = device::narrow(out, 0, hidden, hidden);
        device::mm_out(bottom, device::t(d_up), x);
      }
      dwg = out;
    }
    if (need(2)) dwu = device::linear(device::t(d_up), xt, std::nullopt);
    auto column_sums = [](const Tensor &t, const Tensor &like) {
      const int64_t dim0[1] = {0};
      Tensor sum = torch::stable::sum(t, IntArrayRef(dim0, 1), false, torch::headeronly::ScalarType::Float);
      return torch::stable::to(sum, like.scalar_type());
    };
    if (need(4) || need(5)) {
      if (b_gate.has_value() && b_gate->size(0) == 2 * hidden) {  // merged bias
        dbg = aten::cat0(column_sums(d_gate, *b_gate), column_sums(d_up, *b_gate));
      } else {
        if (need(4)) dbg = column_sums(d_gate, x);
        if (need(5)) dbu = column_sums(d_up, x);
      }
    }
    (void)xt;
  }
  if (need(3)) dwd = device::linear(device::t(grad), device::t(h), std::nullopt);  // grad.T @ h
  if (need(6)) {
    const int64_t dim0[1] = {0};
    dbd = torch::stable::to(torch::stable::sum(grad, IntArrayRef(dim0, 1), false, torch::headeronly::ScalarType::Float),
                            grad.scalar_type());
  }
  return {dx, dwg, dwu, dwd, dbg, dbu, dbd};
}

}  // namespace geglu_stable
