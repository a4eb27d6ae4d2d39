// _geglu_mlp: the GeGLU MLP as one native call, the op every MLP layer forward runs.
//
//   y = (gelu(x @ w_gate.T + b_gate) * (x @ w_up.T + b_up)) @ w_down.T + b_down + residual
//
// One dispatcher call does the argument checks (gemm_checks.h: the only validation the
// call gets), picks the kernels and launches them, with no Python between them: a
// decode step of a small model is bound by the host issuing its kernels, and Python
// custom ops and Triton's launcher cost tens of microseconds per call.
//
// Inference (no input needs a gradient, or below autograd): the gate/up GEMM with the
// GeGLU fused in, where the backend has a kernel for the call (fused_gate_up: the
// Hopper engine on sm_90), else torch's GEMM writing [gate | up] and the geglu op; then
// the down GEMM on torch's (cuBLAS), with b_down and the residual in it.
//
// Training: a C++ autograd node (GegluMlp below). Saved for backward: x, the weights,
// the pre-activations [gate | up] ([M, 2*hidden]) and h = gelu(gate) * up ([M, hidden]);
// eager autograd keeps 4*M*hidden elements (gate, gelu(gate), up, h), this 3*M*hidden.
// A training step from Python custom ops took 989 us for 636 us of kernels on an H100;
// this op, 688 us (docs/DESIGN.md).
//
// x is [..., K]; w_up absent: w_gate is a merged [2*hidden, K] gate/up weight (gate rows
// first), and its bias either merged (b_gate of 2*hidden, b_up absent) or split.

#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "gemm_checks.h"
#include "torch_binding.h"

#define GEGLU_STR_(x) #x
#define GEGLU_STR(x) GEGLU_STR_(x)

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The activation ops are called through the dispatcher, not as C++ functions: under
// torch.compile / fake tensors (opcheck's AOT tests) they must reach their fake
// implementations. This build's namespace is TORCH_EXTENSION_NAME.
at::Tensor geglu_op(const at::Tensor &gate, const at::Tensor &up, std::string_view approximate) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow(GEGLU_STR(TORCH_EXTENSION_NAME) "::geglu", "")
                             .typed<at::Tensor(const at::Tensor &, const at::Tensor &, std::string_view)>();
  return op.call(gate, up, approximate);
}

std::tuple<at::Tensor, at::Tensor> geglu_backward_op(const at::Tensor &grad_out, const at::Tensor &gate,
                                                     const at::Tensor &up, std::string_view approximate) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow(GEGLU_STR(TORCH_EXTENSION_NAME) "::geglu_backward", "")
          .typed<std::tuple<at::Tensor, at::Tensor>(const at::Tensor &, const at::Tensor &, const at::Tensor &,
                                                    std::string_view)>();
  return op.call(grad_out, gate, up, approximate);
}

at::Tensor opt(const c10::optional<at::Tensor> &t) { return t.has_value() ? *t : at::Tensor(); }

// [gate | up] pre-activations as one [M, 2*hidden] tensor.
at::Tensor gate_up(const at::Tensor &x, const at::Tensor &w_gate, const at::Tensor &w_up, const at::Tensor &b_gate,
                   const at::Tensor &b_up) {
  if (!w_up.defined()) {  // merged weight: one GEMM
    const int64_t hidden = w_gate.size(0) / 2;
    at::Tensor bias = b_gate;
    if (b_up.defined() || (b_gate.defined() && b_gate.size(0) == hidden)) {
      const at::Tensor ref = b_up.defined() ? b_up : b_gate;
      bias = at::cat({b_gate.defined() ? b_gate : at::zeros_like(ref), b_up.defined() ? b_up : at::zeros_like(ref)});
    }
    return bias.defined() ? at::addmm(bias, x, w_gate.t()) : at::mm(x, w_gate.t());
  }
  // Two GEMMs writing the column halves in place (the row stride is the GEMM's ldc).
  const int64_t hidden = w_gate.size(0);
  at::Tensor pre = at::empty({x.size(0), 2 * hidden}, x.options());
  const at::Tensor w[2] = {w_gate, w_up};
  const at::Tensor b[2] = {b_gate, b_up};
  for (int i = 0; i < 2; ++i) {
    at::Tensor cols = pre.narrow(1, i * hidden, hidden);
    if (b[i].defined()) {
      at::addmm_out(cols, b[i], x, w[i].t());
    } else {
      at::mm_out(cols, x, w[i].t());
    }
  }
  return pre;
}

// h @ w_down.T + b_down + residual, as linear.py's _cublas_linear does it.
at::Tensor down(const at::Tensor &h, const at::Tensor &w_down, const at::Tensor &b_down, const at::Tensor &residual) {
  if (!b_down.defined()) {
    return residual.defined() ? at::addmm(residual, h, w_down.t()) : at::mm(h, w_down.t());
  }
  at::Tensor y = at::addmm(b_down, h, w_down.t());
  if (residual.defined()) y.add_(residual);
  return y;
}

struct Forward {
  at::Tensor y, pre, h;
};

Forward run_forward(const at::Tensor &x, const at::Tensor &w_gate, const at::Tensor &w_up, const at::Tensor &w_down,
                    const at::Tensor &b_gate, const at::Tensor &b_up, const at::Tensor &b_down,
                    const at::Tensor &residual, std::string_view approximate) {
  at::Tensor pre = gate_up(x, w_gate, w_up, b_gate, b_up);
  const int64_t hidden = pre.size(1) / 2;
  at::Tensor h = geglu_op(pre.narrow(1, 0, hidden), pre.narrow(1, hidden, hidden), approximate);
  return {down(h, w_down, b_down, residual), pre, h};
}

at::Tensor column_sums(const at::Tensor &t, const at::Tensor &like) {
  return t.sum(0, false, at::kFloat).to(like.scalar_type());
}

// Optional tensors are passed as std::optional so that absent ones are not autograd
// inputs; the context's needs_input_grad counts only the present ones (its "edges"),
// so forward records each argument's edge index.
using OptTensor = std::optional<at::Tensor>;

class GegluMlp : public torch::autograd::Function<GegluMlp> {
 public:
  static constexpr int kTensorArgs = 8;  // x, w_gate, w_up, w_down, b_gate, b_up, b_down, residual

  static at::Tensor forward(AutogradContext *ctx, const at::Tensor &x, const at::Tensor &w_gate,
                            const OptTensor &w_up, const at::Tensor &w_down, const OptTensor &b_gate,
                            const OptTensor &b_up, const OptTensor &b_down, const OptTensor &residual,
                            const std::string &approximate) {
    const bool present[kTensorArgs] = {true,
                                       true,
                                       opt(w_up).defined(),
                                       true,
                                       opt(b_gate).defined(),
                                       opt(b_up).defined(),
                                       opt(b_down).defined(),
                                       opt(residual).defined()};
    std::vector<int64_t> edge(kTensorArgs, -1);
    for (int i = 0, next = 0; i < kTensorArgs; ++i) {
      if (present[i]) edge[i] = next++;
    }
    at::AutoDispatchBelowADInplaceOrView guard;
    Forward f = run_forward(x, w_gate, opt(w_up), w_down, opt(b_gate), opt(b_up), opt(b_down), opt(residual),
                            approximate);
    ctx->save_for_backward({x, w_gate, opt(w_up), w_down, opt(b_gate), opt(b_up), f.pre, f.h});
    ctx->saved_data["approximate"] = approximate;
    ctx->saved_data["edge"] = edge;
    return f.y;
  }

  static variable_list backward(AutogradContext *ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w_gate = saved[1], &w_up = saved[2], &w_down = saved[3];
    const at::Tensor &b_gate = saved[4], &b_up = saved[5], &pre = saved[6], &h = saved[7];
    const std::string approximate = ctx->saved_data["approximate"].toStringRef();
    const std::vector<int64_t> edge = ctx->saved_data["edge"].toIntVector();
    auto need = [&](int i) { return edge[i] >= 0 && ctx->needs_input_grad(edge[i]); };
    const at::Tensor grad = grads[0].contiguous();
    at::Tensor dx, dwg, dwu, dwd, dbg, dbu, dbd, dres;

    if (need(0) || need(1) || need(2) || need(4) || need(5)) {
      const int64_t hidden = w_down.size(1);
      auto [d_gate, d_up] = geglu_backward_op(grad.mm(w_down), pre.narrow(1, 0, hidden), pre.narrow(1, hidden, hidden),
                                              approximate);
      const bool merged = !w_up.defined();
      const at::Tensor wg = merged ? w_gate.narrow(0, 0, hidden) : w_gate;
      const at::Tensor wu = merged ? w_gate.narrow(0, hidden, hidden) : w_up;
      if (need(0)) dx = d_gate.mm(wg).addmm_(d_up, wu);  // in place: addmm would first copy its input
      if (need(1)) {
        dwg = d_gate.t().mm(x);
        if (merged) dwg = at::cat({dwg, d_up.t().mm(x)});
      }
      if (need(2)) dwu = d_up.t().mm(x);
      if (need(4) || need(5)) {
        if (b_gate.defined() && b_gate.size(0) == 2 * hidden) {  // merged bias
          dbg = at::cat({column_sums(d_gate, b_gate), column_sums(d_up, b_gate)});
        } else {
          if (need(4)) dbg = column_sums(d_gate, b_gate);
          if (need(5)) dbu = column_sums(d_up, b_up);
        }
      }
    }
    if (need(3)) dwd = grad.t().mm(h);
    if (need(6)) dbd = column_sums(grad, grad);
    if (need(7)) dres = grad;
    return {dx, dwg, dwu, dwd, dbg, dbu, dbd, dres, at::Tensor()};
  }
};

// ------------------------------------------------------------------ inference

// The problem of one call, checked, with x and the residual as [M, K] / [M, N] views.
struct Problem {
  at::Tensor x, residual;
  std::vector<int64_t> out_shape;  // [..., N]
  bool tanh;
};

Problem check_and_flatten(const at::Tensor &x, const at::Tensor &w_gate, const OptTensor &w_up,
                          const at::Tensor &w_down, const OptTensor &b_gate, const OptTensor &b_up,
                          const OptTensor &b_down, const OptTensor &residual, std::string_view approximate) {
  gemm_checks::check_x(x);
  const int64_t hidden = gemm_checks::check_gate_up(x, w_gate, w_up, b_gate, b_up);
  gemm_checks::check_linear_operand("w_down", w_down, x, hidden);
  const int64_t n = w_down.size(0);
  gemm_checks::check_optional("b_down", b_down, x, {n});
  std::vector<int64_t> out_shape = x.sizes().vec();
  out_shape.back() = n;
  gemm_checks::check_optional("residual", residual, x, out_shape);
  const bool tanh = gemm_checks::is_tanh(approximate);
  const int64_t k = x.size(-1);
  return {x.dim() == 2 ? x : x.reshape({-1, k}),
          !residual.has_value() ? at::Tensor() : (residual->dim() == 2 ? *residual : residual->reshape({-1, n})),
          std::move(out_shape), tanh};
}

// gelu(gate) * up without the [M, 2*hidden] pre-activations where the backend has a fused
// kernel for the call, else from torch's GEMM and the geglu op.
at::Tensor inference_gate_up(const at::Tensor &x, const at::Tensor &w_gate, const at::Tensor &w_up,
                             const at::Tensor &b_gate, const at::Tensor &b_up, std::string_view approximate,
                             bool tanh) {
  const bool empty = x.size(0) == 0 || x.size(1) == 0 || w_gate.size(0) == 0;
  if (!empty) {
    // Separate [hidden, K] views of a merged weight (and bias): the fused kernels read
    // two row ranges of one tensor in place.
    at::Tensor wg = w_gate, wu = w_up, bg = b_gate, bu = b_up;
    if (!w_up.defined()) {
      const int64_t hidden = w_gate.size(0) / 2;
      wg = w_gate.narrow(0, 0, hidden);
      wu = w_gate.narrow(0, hidden, hidden);
      if (b_gate.defined() && !b_up.defined() && b_gate.size(0) == 2 * hidden) {
        bg = b_gate.narrow(0, 0, hidden);
        bu = b_gate.narrow(0, hidden, hidden);
      }
    }
    at::Tensor h = fused_gate_up(x, wg, wu, bg.defined() ? c10::optional<at::Tensor>(bg) : c10::nullopt,
                                 bu.defined() ? c10::optional<at::Tensor>(bu) : c10::nullopt, tanh);
    if (h.defined()) return h;
  }
  at::Tensor pre = gate_up(x, w_gate, w_up, b_gate, b_up);
  const int64_t hidden = pre.size(1) / 2;
  return geglu_op(pre.narrow(1, 0, hidden), pre.narrow(1, hidden, hidden), approximate);
}

at::Tensor inference(const Problem &p, const at::Tensor &w_gate, const OptTensor &w_up, const at::Tensor &w_down,
                     const OptTensor &b_gate, const OptTensor &b_up, const OptTensor &b_down,
                     std::string_view approximate) {
  at::Tensor h = inference_gate_up(p.x, w_gate, opt(w_up), opt(b_gate), opt(b_up), approximate, p.tanh);
  return down(h, w_down, opt(b_down), p.residual).view(p.out_shape);
}

bool any_requires_grad(std::initializer_list<const at::Tensor *> ts, std::initializer_list<const OptTensor *> opts) {
  for (const at::Tensor *t : ts) {
    if (t->requires_grad()) return true;
  }
  for (const OptTensor *t : opts) {
    if (t->has_value() && (*t)->requires_grad()) return true;
  }
  return false;
}

}  // namespace

// Backend kernel: reached below autograd (inference-mode tensors, compiled graphs).
torch::Tensor geglu_mlp(torch::Tensor const &x, torch::Tensor const &w_gate, c10::optional<torch::Tensor> const &w_up,
                        torch::Tensor const &w_down, c10::optional<torch::Tensor> const &b_gate,
                        c10::optional<torch::Tensor> const &b_up, c10::optional<torch::Tensor> const &b_down,
                        c10::optional<torch::Tensor> const &residual, std::string_view approximate) {
  const Problem p = check_and_flatten(x, w_gate, w_up, w_down, b_gate, b_up, b_down, residual, approximate);
  return inference(p, w_gate, w_up, w_down, b_gate, b_up, b_down, approximate);
}

// Autograd kernel: the training node where an input needs a gradient, else the op again
// below autograd, through the dispatcher: real tensors reach the backend kernel (which
// checks), fake ones (torch.compile, opcheck) the op's fake. A direct call of the backend
// kernel here would run CUDA launches on fake tensors.
torch::Tensor geglu_mlp_autograd(torch::Tensor const &x, torch::Tensor const &w_gate,
                                 c10::optional<torch::Tensor> const &w_up, torch::Tensor const &w_down,
                                 c10::optional<torch::Tensor> const &b_gate, c10::optional<torch::Tensor> const &b_up,
                                 c10::optional<torch::Tensor> const &b_down,
                                 c10::optional<torch::Tensor> const &residual, std::string_view approximate) {
  if (at::GradMode::is_enabled() &&
      any_requires_grad({&x, &w_gate, &w_down}, {&w_up, &b_gate, &b_up, &b_down, &residual})) {
    const Problem p = check_and_flatten(x, w_gate, w_up, w_down, b_gate, b_up, b_down, residual, approximate);
    // p.x / p.residual are views recorded by autograd (this kernel runs above it).
    const OptTensor res = p.residual.defined() ? OptTensor(p.residual) : std::nullopt;
    at::Tensor y = GegluMlp::apply(p.x, w_gate, w_up, w_down, b_gate, b_up, b_down, res, std::string(approximate));
    return y.view(p.out_shape);
  }
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow(GEGLU_STR(TORCH_EXTENSION_NAME) "::_geglu_mlp", "")
          .typed<at::Tensor(const at::Tensor &, const at::Tensor &, const OptTensor &, const at::Tensor &,
                            const OptTensor &, const OptTensor &, const OptTensor &, const OptTensor &,
                            std::string_view)>();
  at::AutoDispatchBelowADInplaceOrView guard;
  return op.call(x, w_gate, w_up, w_down, b_gate, b_up, b_down, residual, approximate);
}
