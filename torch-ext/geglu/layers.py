"""Drop-in layers for `kernels.kernelize`.

Each class replaces the `forward` of a module that already exists in a model (a
Transformers activation, a Gemma MLP, a T5 gated-GELU block, a BERT intermediate
projection). Hub rules: no `__init__`, no state, no class attributes other than
`has_backward` / `can_torch_compile`, no methods other than `forward`, and a
`forward` whose signature matches the replaced one. `kernelize` binds `forward` to
the adopting module, so `self` is that module: each docstring names the attributes
read from it (its linears, its activation, its dropout), read as they are, with no
per-call copies.

On a compiled variant each block's forward is one native op call (`_geglu_mlp`,
`_linear_bias_gelu`: checks, routing and launches in C++); the Python here only
decides whether the module is one the kernels compute exactly. Training under
torch.compile, the blocks run the module's own forward instead: the graph Inductor fuses
and differentiates compiling the model alone, read through the paths Dynamo guards
compiling it alone (`_is_compiling`).

The functional API these call picks the kernel for the tensor's device (compiled
or Triton on CUDA, native kernels on CPU), so a kernelized model also runs on CPU.

Gemma MLPs whose projections are Transformers' block-scaled `FP8Linear` run the FP8 MLP
(`geglu_mlp_fp8`) on the modules' FP8 weights and scales, for inference.

When a module is configured in a way the fused kernels do not compute (another
activation, other quantized or mixed-dtype weights, autocast), `forward` computes exactly
what the original module does, so kernelizing never changes a model's results.

Under tensor parallelism (DTensor weights) the GeGLU blocks run the fused gate/up GEMM
on this rank's weight shards where the plan is a standard column-wise one, and leave the
reduction to the down projection's TP wrapper (_tensor_parallel.py); every other plan
runs the module's own forward. The activation layers run torch's GELU on a DTensor.
"""

import sys
from types import MethodType as _MethodType

import torch
import torch.nn as nn
import torch.nn.functional as F

# The functional API, called through its defining modules (`_linear.geglu_linear`, ...):
# this module's public names are its layer classes alone (`__all__`), and a test that
# replaces a function in its module sees every layer call of it.
from . import _tensor_parallel
from . import activation as _activation
from . import fp8_gemm as _fp8_gemm
from . import fp8_mlp as _fp8_mlp
from . import linear as _linear

# dtypes the kernels compute in (math in float32).
_KERNEL_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_DENSE_TYPES = (nn.Parameter, torch.Tensor)
# nn.Linear and its forward as globals: _linear_operands tests each module's class
# against them, one global read each instead of a global and an attribute.
_NNLinear = nn.Linear
_nn_linear_forward = nn.Linear.forward


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


def _submodules(module: nn.Module, *names):
    """module.<name> for each name, read from the module's `_modules` where it is
    registered there (nn.Module's __getattr__ costs about 1 us per read on the lent
    hosts, several per call; a decode step is bound by such host time)."""
    registered = module._modules
    try:
        return [registered[n] for n in names]
    except KeyError:  # one is a plain attribute (an activation function, say)
        return [registered[n] if n in registered else getattr(module, n) for n in names]


def _linear_operands(x: torch.Tensor, *linears):
    """[weight, bias, weight, bias, ...] of `linears` (each a plain tensor, a bias
    possibly None) when the fused kernels compute what calling them would: plain
    nn.Linear modules running nn.Linear.forward (not quantized or otherwise
    re-implemented subclasses, whose weights mean something else; no forward set on the
    instance, as accelerate's offload hooks or another kernelize mapping do; no forward
    hooks, which the fused call would skip), with dense weights and biases in x's dtype
    registered as parameters (a parametrized weight is computed on access: not here; a
    DTensor or other subclass is not dense), and no autocast (under which nn.Linear would
    run in the autocast dtype). Else None.

    This is most of a layer call's Python (docs/DESIGN.md, "Host time"), so it reads each
    module's state from its `__dict__` directly, once, with no attribute lookups through
    the class (see _submodules)."""
    # x.is_cuda first: x.device builds a torch.device object on every read.
    dtype = x.dtype
    if dtype not in _KERNEL_DTYPES or torch.is_autocast_enabled("cuda" if x.is_cuda else x.device.type):
        return None
    operands = []
    for m in linears:
        kind = type(m)
        # nn.Linear itself first: one identity test where a subclass takes two.
        if kind is not _NNLinear and not (issubclass(kind, _NNLinear) and kind.forward is _nn_linear_forward):
            return None
        state = m.__dict__
        if state["_forward_hooks"] or state["_forward_pre_hooks"] or "forward" in state:
            return None
        params = state["_parameters"]
        w, b = params.get("weight"), params.get("bias")
        if type(w) not in _DENSE_TYPES or w.dtype != dtype:
            return None
        if b is not None and (type(b) not in _DENSE_TYPES or b.dtype != dtype):
            return None
        operands.append(w)
        operands.append(b)
    return operands


# --------------------------------------------------------------------------- FP8 projections

# Transformers' FP8Linear (FineGrainedFP8Config), matched by class name as the
# activations are: FP8GroupedLinear and other subclasses compute something else.
_FP8_LINEAR_NAME = "FP8Linear"
_FP8_WEIGHT_DTYPE = torch.float8_e4m3fn
_FP8_ACTIVATION_DTYPES = (torch.float16, torch.bfloat16)
_FP8_BLOCK = 128


def _fp8_activation_served(x: torch.Tensor) -> bool:
    """Whether the FP8 kernels compute a call on x: a dense float16/bfloat16 tensor (no
    DTensor), no gradient needed (FP8Linear gives x a gradient through its own autograd
    Function; the FP8 kernels are inference-only), no autocast; on CUDA only where the
    native FP8 kernels serve x's GPU (the backend says which: `_geglu_mlp_fp8_serves`,
    the sm_90 engine): elsewhere the float32 composite would run, slower than FP8Linear's
    own kernels. On CPU, where FP8Linear has no kernels, the composite serves."""
    if x.dtype not in _FP8_ACTIVATION_DTYPES or x.layout != torch.strided or x.is_nested or _is_dtensor(x):
        return False
    if x.is_cuda and not _fp8_mlp._native_fp8_x(x):
        return False
    if x.requires_grad and torch.is_grad_enabled():
        return False
    return not torch.is_autocast_enabled("cuda" if x.is_cuda else x.device.type)


def _fp8_linear_state(m):
    """(weight, weight_scale_inv, bias) of `m` when the FP8 kernels compute what calling
    it would: a Transformers `FP8Linear` with 128x128 block scales (`block_size` (128,
    128) or [128, 128]), the dynamic activation scheme (per-token 1x128 groups, quantized
    in the forward; the static scheme's per-tensor `activation_scale` is another
    computation), a dense float8_e4m3fn weight whose sizes are multiples of 128, dense
    float32 `weight_scale_inv` of the block shape [out/128, in/128], and a bias (or None)
    of [out] elements. Else None: the module's own computation runs.

    Per-tensor scales (`block_size=None`) fall back. `scale_fmt="ue8m0"` only rounds
    each block scale to a power of two when quantizing, and dequantizes the same way
    (w * scale), but stores the scales as float8_e8m0fnu: the kernels read float32
    scales in place, and converting would copy them on every call, so those modules
    fall back too (they fail the float32 test). The tensors are the module's own
    parameters, read in place (no copies, no state)."""
    if type(m).__name__ != _FP8_LINEAR_NAME:
        return None
    state = m.__dict__
    block = state.get("block_size")
    if not isinstance(block, (tuple, list)) or tuple(block) != (_FP8_BLOCK, _FP8_BLOCK):
        return None
    if state.get("activation_scheme") != "dynamic":
        return None
    params = state["_parameters"]
    if params.get("activation_scale") is not None:
        return None
    w, scale, bias = params.get("weight"), params.get("weight_scale_inv"), params.get("bias")
    if type(w) not in _DENSE_TYPES or w.dtype != _FP8_WEIGHT_DTYPE or w.dim() != 2:
        return None
    n, k = w.shape
    if n % _FP8_BLOCK or k % _FP8_BLOCK:
        return None
    if type(scale) not in _DENSE_TYPES or scale.dtype != torch.float32:
        return None
    if tuple(scale.shape) != (n // _FP8_BLOCK, k // _FP8_BLOCK):
        return None
    if bias is not None and (type(bias) not in _DENSE_TYPES or tuple(bias.shape) != (n,)):
        return None
    return w, scale, bias


def _fp8_operands(x: torch.Tensor, *linears):
    """[weight, weight_scale_inv, ...] of `linears` when geglu_mlp_fp8 computes what
    calling them would: x one the FP8 kernels serve (_fp8_activation_served) and each
    linear one they compute (_fp8_linear_state) without a bias, with no hooks (the fused
    call would skip them) and no forward set on the instance other than this package's
    FP8Linear layer (kernelize's, which computes the same). Else None."""
    if not _fp8_activation_served(x):
        return None
    operands = []
    for m in linears:
        state = m.__dict__
        if state.get("_forward_hooks") or state.get("_forward_pre_hooks"):
            return None
        # Not getattr(forward, "__func__", None): Dynamo 2.11 answers the default for a
        # bound method, so a compiled model lost the fused MLP to three fp8_linear calls.
        forward = state.get("forward")
        if forward is not None and not (type(forward) is _MethodType and forward.__func__ is FP8Linear.forward):
            return None
        linear = _fp8_linear_state(m)
        if linear is None or linear[2] is not None:
            return None
        operands.append(linear[0])
        operands.append(linear[1])
    return operands


def _gated_gelu_mlp(x: torch.Tensor, gate, up, down, act, dropout=None) -> torch.Tensor:
    """down(dropout(act(gate(x)) * up(x))) for GeGLU blocks: one fused MLP call where the
    modules are ones the kernels compute exactly and dropout is inactive (plain
    nn.Linear first; then, without a dropout module, three FP8Linear the FP8 MLP
    computes: _fp8_operands); the gate/up
    GEMM with the GeGLU epilogue, then dropout and `down`, where only gate/up are;
    the modules' own computation otherwise."""
    approximate = _gelu_approximate(act)
    if approximate is None:
        return _dropout_down(act(gate(x)) * up(x), down, dropout)
    if dropout is None or not dropout.training or dropout.p == 0:
        # The common case, checked in one pass: all three linears fused.
        operands = _linear_operands(x, gate, up, down)
        if operands is not None:
            w_gate, b_gate, w_up, b_up, w_down, b_down = operands
            return _linear.mlp_layer_entry(x, w_gate, w_up, w_down, b_gate, b_up, b_down, None, approximate)
        # Blocks with a dropout (T5) are not served: T5 casts h to `wo`'s weight dtype,
        # which for an FP8Linear `wo` would be float8 (Transformers keeps T5's wo unquantized).
        fp8 = _fp8_operands(x, gate, up, down) if dropout is None else None
        if fp8 is not None:
            return _fp8_mlp.geglu_mlp_fp8(x, *fp8, None, approximate)
    gate_up = _linear_operands(x, gate, up)
    if gate_up is not None:
        w_gate, b_gate, w_up, b_up = gate_up
        h = _linear.geglu_linear(x, w_gate, w_up, b_gate=b_gate, b_up=b_up, approximate=approximate)
    else:
        # Tensor parallelism: gate/up column-sharded by a plan we know compute this rank's
        # shard of h on their local weights (the fused GEMM, no gather); `down`, called
        # below as the module's forward calls it, does the plan's reduction.
        local = _tensor_parallel_gate_up(x, gate, up)
        if local is None:
            h = act(gate(x)) * up(x)
        else:
            x_local, w_gate, w_up, b_gate, b_up = local
            h = _linear.geglu_linear(x_local, w_gate, w_up, b_gate=b_gate, b_up=b_up, approximate=approximate)
    return _dropout_down(h, down, dropout)


def _tensor_parallel_gate_up(x: torch.Tensor, gate, up):
    """_tensor_parallel.local_gate_up where x is one the kernels compute (dtype, no
    autocast: as _linear_operands); None otherwise. Reached only where the plain
    route did not serve, so plain weights pay nothing for it."""
    if x.dtype not in _KERNEL_DTYPES or torch.is_autocast_enabled("cuda" if x.is_cuda else x.device.type):
        return None
    return _tensor_parallel.local_gate_up(x, gate, up)


def _dropout_down(h: torch.Tensor, down, dropout) -> torch.Tensor:
    """down(dropout(h)), with T5's cast of h to `down`'s weight dtype when there is a dropout."""
    if dropout is None:
        return down(h)
    h = dropout(h)
    # T5's own rule, kept verbatim in effect: run `down` (wo) in its weight's dtype
    # (float32 for an 8-bit / half-precision load), but never cast to int8.
    w = down.weight
    if isinstance(w, torch.Tensor) and h.dtype != w.dtype and w.dtype != torch.int8:
        h = h.to(w.dtype)
    return down(h)


def _is_dtensor(x: torch.Tensor) -> bool:
    """Whether x is a DTensor (TP's output kept distributed, `use_local_output=False`):
    the native kernels have no sharding rule, so the activation layers run torch's GELU
    on it, which DTensor shards (a Partial input included). A plain tensor costs one
    type check."""
    if type(x) is torch.Tensor:
        return False
    dtensor = sys.modules.get("torch.distributed.tensor")
    return dtensor is not None and isinstance(x, dtensor.DTensor)


# --------------------------------------------------------------------------- activations


def _kernel_serves_activation(x: torch.Tensor) -> bool:
    """Whether the activation layers run the kernel on x: a dense tensor of a dtype it
    computes (torch's GELU serves sparse, nested and DTensor inputs as the original
    module would), and no gradient to carry (the kernel writes its output outside
    autograd, so where autograd needs one the layer runs torch's GELU, which has it)."""
    if x.dtype not in _KERNEL_DTYPES or x.layout != torch.strided or x.is_nested or _is_dtensor(x):
        return False
    return not (x.requires_grad and torch.is_grad_enabled())


class GeluTanh(nn.Module):
    """`gelu(x, approximate="tanh")`; replaces Transformers' `GELUTanh` ("GeluTanh")
    and, mapped by name, `NewGELU` / `FastGELU`. Returns a new tensor.

    The kernel writes into a fresh output without autograd, so where the input needs a
    gradient the layer runs torch's GELU; `kernelize` keeps the original forward in
    `Mode.TRAINING` (no backward of its own)."""

    has_backward = False
    can_torch_compile = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not _kernel_serves_activation(x):
            return F.gelu(x, approximate="tanh")
        # The kernels take a row-strided matrix; activations in a model are contiguous
        # already, so this is a copy only for unusual layouts.
        x = x.contiguous()
        return _activation.gelu_tanh(torch.empty_like(x), x)


class Gelu(nn.Module):
    """Exact (erf) `gelu(x)`; replaces Transformers' `GELUActivation` ("GeLU", which
    Transformers maps to a layer named "Gelu"). Returns a new tensor; torch's GELU
    where the input needs a gradient, as GeluTanh."""

    has_backward = False
    can_torch_compile = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not _kernel_serves_activation(x):
            return F.gelu(x)
        x = x.contiguous()
        return _activation.gelu(torch.empty_like(x), x)


class GeluTanhAndMul(nn.Module):
    """`gelu_tanh(x[..., :d]) * x[..., d:]` over a merged `[..., 2d]` input, as
    kernels-community/activation's layer of this name; returns a new `[..., d]`
    tensor. Differentiable."""

    has_backward = True
    can_torch_compile = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _activation.geglu_merged(x, approximate="tanh")


class GeluAndMul(nn.Module):
    """`gelu(x[..., :d]) * x[..., d:]` (exact GELU) over a merged `[..., 2d]` input;
    returns a new `[..., d]` tensor. Differentiable."""

    has_backward = True
    can_torch_compile = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _activation.geglu_merged(x, approximate="none")


# --------------------------------------------------------------------------- blocks


# torch.compile with gradients: the module's own forward. The eager routes, traced, would give
# the same graph (linear.py, `_traced_with_grad`), but Dynamo guards every object traced Python
# reads, by the path it read it through, and checks those guards before every compiled call:
# the eager routes read module state from `__dict__`, and the package's functions, constants
# and globals (`torch`, `F`: module objects the model's code reaches through its own globals,
# an aliasing guard evaluated in Python each). The module's forward reads what compiling the
# model alone reads, the same way. The blocks' check calls two functions bound here, not read
# through `torch` (no aliasing guard), after x.requires_grad: an inference call pays that read.
_is_compiling = torch.compiler.is_compiling
_is_grad_enabled = torch.is_grad_enabled


class GeGLUMLP(nn.Module):
    """`down_proj(act_fn(gate_proj(x)) * up_proj(x))` for Gemma-family MLPs
    (`GemmaMLP`, `Gemma2MLP`, `Gemma3MLP`, `Gemma4TextMLP` with its double-wide layers,
    `VaultGemmaMLP`; Transformers' hub name "GeGLUMLP").

    Runs as two fused GEMMs: gate and up with the GeGLU in the epilogue, then down.
    Reads `gate_proj`, `up_proj`, `down_proj` (nn.Linear) and `act_fn`, whose GELU
    flavour (tanh or exact) it computes; projection biases are honoured when present.

    Projections that are Transformers `FP8Linear` modules (FineGrainedFP8Config: 128x128
    block scales, dynamic activations, no bias) run as `geglu_mlp_fp8` on their FP8
    weights and float32 scales where no gradient is needed; any other FP8 configuration
    runs the module's own forward (_fp8_operands lists the conditions)."""

    has_backward = True
    can_torch_compile = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.requires_grad and _is_compiling() and _is_grad_enabled():
            return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
        return _gated_gelu_mlp(x, *_submodules(self, "gate_proj", "up_proj", "down_proj", "act_fn"))


class T5GemmaMLP(nn.Module):
    """T5Gemma's MLP (`T5GemmaMLP`): `down_proj(dropout(act_fn(gate_proj(x)) *
    up_proj(x)))`. With its dropout inactive (eval, or p = 0, T5Gemma's default) that is
    GeGLUMLP's computation, routes included (FP8Linear projections too); with dropout
    active, the module's own forward (the kernels have no dropout, and T5Gemma, unlike
    T5, does not cast h to `down_proj`'s dtype)."""

    has_backward = True
    can_torch_compile = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dropout = self.dropout
        if (dropout.training and dropout.p > 0) or (x.requires_grad and _is_compiling() and _is_grad_enabled()):
            return type(self).forward(self, x)
        return _gated_gelu_mlp(x, *_submodules(self, "gate_proj", "up_proj", "down_proj", "act_fn"))


class T5GatedGeluDense(nn.Module):
    """T5 v1.1's gated-GELU feed-forward (`T5DenseGatedActDense`):
    `wo(dropout(act(wi_0(h)) * wi_1(h)))`. Reads `wi_0`, `wi_1`, `wo` (nn.Linear),
    `dropout` and `act`.

    With dropout inactive (eval, or p = 0) and `wo` in the activations' dtype this is
    one fused MLP; otherwise the gate/up GEMM with the GeGLU epilogue, then dropout,
    then T5's cast to `wo`'s dtype (Transformers keeps `wo` in float32 when loading
    T5 in half precision), then `wo`."""

    has_backward = True
    can_torch_compile = True

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if hidden_states.requires_grad and _is_compiling() and _is_grad_enabled():
            return _dropout_down(self.act(self.wi_0(hidden_states)) * self.wi_1(hidden_states), self.wo, self.dropout)
        return _gated_gelu_mlp(hidden_states, *_submodules(self, "wi_0", "wi_1", "wo", "act", "dropout"))


class BiasGeluIntermediate(nn.Module):
    """BERT-style `intermediate_act_fn(dense(h))` (`BertIntermediate` and its many
    copies). Reads `dense` (nn.Linear) and `intermediate_act_fn`, whose GELU flavour it
    reads from the activation.

    `linear_bias_gelu`, whose native op picks the kernel (docs/DESIGN.md): on Hopper
    (sm_90) the engine's GEMM with bias and GELU in its epilogue, on CUDA the tanh GELU
    with a bias in cuBLASLt's GELU_BIAS epilogue, else torch's GEMM and this package's
    GELU kernel in place."""

    has_backward = True
    can_torch_compile = True

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if hidden_states.requires_grad and _is_compiling() and _is_grad_enabled():
            return self.intermediate_act_fn(self.dense(hidden_states))
        act, dense = _submodules(self, "intermediate_act_fn", "dense")
        approximate = _gelu_approximate(act)
        operands = _linear_operands(hidden_states, dense) if approximate is not None else None
        if operands is None:
            return act(dense(hidden_states))
        weight, bias = operands
        return _linear.linear_bias_gelu(hidden_states, weight, bias, approximate=approximate)


class FP8Linear(nn.Module):
    """Transformers' block-scaled `FP8Linear` (FineGrainedFP8Config; hub name
    "FP8Linear"): `fp8_linear(x, weight, weight_scale_inv, bias)` on the FP8 MLP's
    engine, reading `weight`, `weight_scale_inv`, `bias`, `block_size` and
    `activation_scheme` in place. Configurations it does not compute (per-tensor or
    ue8m0 scales, static activation scales, blocks other than 128x128, sizes not
    multiples of 128, an x that needs a gradient, autocast, a GPU without the FP8
    kernels) run the module's own forward (_fp8_linear_state, _fp8_activation_served).
    The module's hooks run around this forward as around its own."""

    has_backward = True
    can_torch_compile = True

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        linear = _fp8_linear_state(self) if _fp8_activation_served(input) else None
        if linear is None:
            return type(self).forward(self, input)
        weight, scale, bias = linear
        return _fp8_gemm.fp8_linear(input, weight, scale, bias)


__all__ = [
    "BiasGeluIntermediate",
    "FP8Linear",
    "GeGLUMLP",
    "Gelu",
    "GeluAndMul",
    "GeluTanh",
    "GeluTanhAndMul",
    "T5GatedGeluDense",
    "T5GemmaMLP",
]
