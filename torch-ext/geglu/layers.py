"""Drop-in layers for `kernels.kernelize`.

Each class replaces the `forward` of a module that already exists in a model (a
Transformers activation, a Gemma MLP, a T5 gated-GELU block, a BERT intermediate
projection). Hub rules: no `__init__`, no state, no class attributes other than
`has_backward` / `can_torch_compile`, no methods other than `forward`, and a
`forward` whose signature matches the replaced one. `kernelize` binds `forward` to
the adopting module, so `self` is that module: the annotations below name the
attributes read from it (its weights, its activation, its dropout), read as they
are, with no per-call copies.

The functional API these call picks the kernel for the tensor's device (compiled
or Triton on CUDA, native kernels on CPU), so a kernelized model also runs on CPU.

When a module is configured in a way the fused kernels do not compute (another
activation, quantized or mixed-dtype weights, autocast), `forward` computes exactly
what the original module does, so kernelizing never changes a model's results.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

from .activation import geglu_merged, gelu, gelu_tanh
from .linear import geglu_linear, geglu_mlp, linear_bias_gelu

# dtypes the kernels compute in (math in float32).
_KERNEL_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

# Transformers activation classes by the GELU they compute, matched by class name
# because the kernel package may import only torch. All of the tanh ones evaluate
# 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), the same function up to rounding;
# GELUActivation is torch's exact erf GELU (BERT's "gelu").
_TANH_GELU_CLASSES = frozenset(
    {
        "GELUTanh",  # "gelu_pytorch_tanh" (Gemma), "gelu_python_tanh"
        "PytorchGELUTanh",  # its older name
        "NewGELUActivation",  # "gelu_new" (T5 v1.1, GPT-2)
        "FastGELUActivation",  # "gelu_fast"
        "AccurateGELUActivation",  # "gelu_accurate"
    }
)
_EXACT_GELU_CLASSES = frozenset({"GELUActivation"})  # "gelu", "gelu_python"


def _gelu_approximate(act) -> "str | None":
    """`"tanh"` or `"none"` for the GELU that `act` computes; None if `act` is no GELU
    we know (the layer then runs the module's own computation)."""
    if isinstance(act, nn.GELU):
        return act.approximate
    if act is F.gelu:
        return "none"
    name = type(act).__name__
    if name in _TANH_GELU_CLASSES:
        return "tanh"
    if name in _EXACT_GELU_CLASSES:
        return "none"
    return None


def _is_plain_linear(m) -> bool:
    """An nn.Linear that computes x @ W.T + b with a dense float weight: not a
    quantized or otherwise re-implemented subclass, whose weights mean something else."""
    return (
        isinstance(m, nn.Linear)
        and type(m).forward is nn.Linear.forward
        and type(m.weight) in (nn.Parameter, torch.Tensor)
        and m.weight.dtype in _KERNEL_DTYPES
    )


def _fusable(x: torch.Tensor, *linears) -> bool:
    """True when the fused kernels compute what the eager modules would: plain
    linears whose weights (and biases) share the input's dtype, and no autocast
    (under autocast nn.Linear would run in the autocast dtype)."""
    if x.dtype not in _KERNEL_DTYPES or torch.is_autocast_enabled(x.device.type):
        return False
    for m in linears:
        if not _is_plain_linear(m) or m.weight.dtype != x.dtype:
            return False
        if m.bias is not None and m.bias.dtype != x.dtype:
            return False
    return True


def _geglu_mlp_of(x: torch.Tensor, gate: nn.Linear, up: nn.Linear, down: nn.Linear, approximate: str):
    """geglu_mlp over three nn.Linear modules' weights and biases, read as they are."""
    return geglu_mlp(
        x, gate.weight, up.weight, down.weight, biases=(gate.bias, up.bias, down.bias), approximate=approximate
    )


# --------------------------------------------------------------------------- activations


class GeluTanh(nn.Module):
    """`gelu(x, approximate="tanh")`; replaces Transformers' `GELUTanh` ("GeluTanh")
    and, mapped by name, `NewGELU` / `FastGELU`. Returns a new tensor.

    The kernel writes into a fresh output without autograd: no backward, so
    `kernelize` keeps the original forward in `Mode.TRAINING`."""

    has_backward = False
    can_torch_compile = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype not in _KERNEL_DTYPES:
            return F.gelu(x, approximate="tanh")
        # The kernels take a row-strided matrix; activations in a model are contiguous
        # already, so this is a copy only for unusual layouts.
        x = x.contiguous()
        return gelu_tanh(torch.empty_like(x), x)


class Gelu(nn.Module):
    """Exact (erf) `gelu(x)`; replaces Transformers' `GELUActivation` ("GeLU", which
    Transformers maps to a layer named "Gelu"). Returns a new tensor. No backward."""

    has_backward = False
    can_torch_compile = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype not in _KERNEL_DTYPES:
            return F.gelu(x)
        x = x.contiguous()
        return gelu(torch.empty_like(x), x)


class GeluTanhAndMul(nn.Module):
    """`gelu_tanh(x[..., :d]) * x[..., d:]` over a merged `[..., 2d]` input, as
    kernels-community/activation's layer of this name; returns a new `[..., d]`
    tensor. Differentiable."""

    has_backward = True
    can_torch_compile = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return geglu_merged(x, approximate="tanh")


class GeluAndMul(nn.Module):
    """`gelu(x[..., :d]) * x[..., d:]` (exact GELU) over a merged `[..., 2d]` input;
    returns a new `[..., d]` tensor. Differentiable."""

    has_backward = True
    can_torch_compile = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return geglu_merged(x, approximate="none")


# --------------------------------------------------------------------------- blocks


class GeGLUMLP(nn.Module):
    """`down_proj(act_fn(gate_proj(x)) * up_proj(x))` for Gemma-family MLPs
    (`GemmaMLP`, `Gemma2MLP`, `Gemma3MLP`; Transformers' hub name "GeGLUMLP").

    Runs as two fused GEMMs: gate and up with the GeGLU in the epilogue, then down.
    The GELU flavour (tanh or exact) is read from the module's `act_fn`; projection
    biases are honoured when present."""

    has_backward = True
    can_torch_compile = True

    gate_proj: nn.Linear
    up_proj: nn.Linear
    down_proj: nn.Linear
    act_fn: nn.Module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        approximate = _gelu_approximate(self.act_fn)
        if approximate is None or not _fusable(x, self.gate_proj, self.up_proj, self.down_proj):
            return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
        return _geglu_mlp_of(x, self.gate_proj, self.up_proj, self.down_proj, approximate)


class T5GatedGeluDense(nn.Module):
    """T5 v1.1's gated-GELU feed-forward (`T5DenseGatedActDense`):
    `wo(dropout(act(wi_0(h)) * wi_1(h)))`.

    With dropout inactive (eval, or p = 0) and `wo` in the activations' dtype this is
    one fused MLP; otherwise the gate/up GEMM with the GeGLU epilogue, then dropout,
    then T5's cast to `wo`'s dtype (Transformers keeps `wo` in float32 when loading
    T5 in half precision), then `wo`."""

    has_backward = True
    can_torch_compile = True

    wi_0: nn.Linear
    wi_1: nn.Linear
    wo: nn.Linear
    dropout: nn.Dropout
    act: nn.Module

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        approximate = _gelu_approximate(self.act)
        if approximate is None or not _fusable(hidden_states, self.wi_0, self.wi_1):
            hidden = self.act(self.wi_0(hidden_states)) * self.wi_1(hidden_states)
        else:
            dropout_active = self.dropout.training and self.dropout.p > 0
            if not dropout_active and _fusable(hidden_states, self.wi_0, self.wi_1, self.wo):
                return _geglu_mlp_of(hidden_states, self.wi_0, self.wi_1, self.wo, approximate)
            hidden = geglu_linear(
                hidden_states,
                self.wi_0.weight,
                self.wi_1.weight,
                b_gate=self.wi_0.bias,
                b_up=self.wi_1.bias,
                approximate=approximate,
            )
        hidden = self.dropout(hidden)
        # T5's own rule, kept verbatim in effect: run `wo` in its weight's dtype
        # (float32 for an 8-bit / half-precision load), but never cast to int8.
        if (
            isinstance(self.wo.weight, torch.Tensor)
            and hidden.dtype != self.wo.weight.dtype
            and self.wo.weight.dtype != torch.int8
        ):
            hidden = hidden.to(self.wo.weight.dtype)
        return self.wo(hidden)


class BiasGeluIntermediate(nn.Module):
    """BERT-style `intermediate_act_fn(dense(h))` (`BertIntermediate` and its many
    copies) as one GEMM with bias and GELU in the epilogue. BERT's "gelu" is the
    exact erf GELU; the flavour is read from the module's activation."""

    has_backward = True
    can_torch_compile = True

    dense: nn.Linear
    intermediate_act_fn: nn.Module

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        approximate = _gelu_approximate(self.intermediate_act_fn)
        if approximate is None or not _fusable(hidden_states, self.dense):
            return self.intermediate_act_fn(self.dense(hidden_states))
        return linear_bias_gelu(hidden_states, self.dense.weight, self.dense.bias, approximate=approximate)


__all__ = [
    "BiasGeluIntermediate",
    "GeGLUMLP",
    "Gelu",
    "GeluAndMul",
    "GeluTanh",
    "GeluTanhAndMul",
    "T5GatedGeluDense",
]
