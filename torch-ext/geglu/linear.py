"""GEMMs with bias / GELU / GeGLU: the public functions and the one place that
decides who computes each call.

Weights are in nn.Linear layout, [out_features, in_features]; x has any number of
leading dimensions (flattened to [tokens, in_features]). Every function validates
its arguments once and is differentiable (x, weights, biases, residual).

On a compiled variant geglu_mlp, geglu_linear and linear_bias_gelu are one native op
call each (torch-ext/: `_geglu_mlp`, `_geglu_linear` and `_linear_bias_gelu` for
inference; `_geglu_mlp_train` and `_geglu_mlp_backward`, joined by `_GegluMlpTrain` here,
for calls that need gradients), which check the arguments (geglu_kernels/ops/gemm_checks.h: the
messages of _checks.py) and pick the kernels in C++, in one place
(geglu_kernels/cuda/fused_gemm_router.cpp; docs/DESIGN.md says why each route wins). What
follows is the Python route, which the noarch (Triton-only) variant, tensor subclasses,
torch.compile with gradients and calls that need gradients take:

    linear_bias        F.linear: cuBLAS(Lt) with the bias in its epilogue.
    linear_bias_gelu   tanh GELU with a bias on CUDA and no gradient needed:
                       cuBLASLt's GELU_BIAS epilogue (torch._addmm_activation, which has
                       no derivative); otherwise F.linear, then F.gelu.
    geglu_linear       no gradient needed, on CUDA: the Triton fused gate/up GEMM
                       (`_fused_gate_up`, triton_kernels/gemm.py); otherwise
                       `_composed_gate_up`: torch's GEMMs, then the package's
                       differentiable geglu.
    geglu_mlp          geglu_linear's routes, then the down projection on cuBLAS with its
                       bias and the residual (`_down_proj`).

Under torch.compile, a call that needs gradients is torch's ops alone, on x as given:
F.linear, F.gelu(gate) * up, F.linear (+ residual), the graph the eager module gives
(`_traced_with_grad`), which Inductor fuses and differentiates itself.

The MLP's names: `geglu_mlp` (public) checks the operands' types and calls
`mlp_layer_entry` (also the layers' entry), which calls the native op `_geglu_mlp` (with
gradients `_GegluMlpTrain`) or the Python composition `_composed_mlp`.

Merged gate/up weight: w_up=None means w_gate is [2*hidden, in] with the gate rows
first (a fused gate_up_proj), read in place; its bias is then either merged (b_gate
of [2*hidden], b_up None) or split. `_split_gate_up` turns that into separate views.
"""

import importlib.util
import math
from typing import NamedTuple, Optional, Tuple

import torch
import torch.nn.functional as F

from ._checks import check_approximate, check_gate_up, check_linear_operand, check_vector, check_x
from ._fastpath import PLAIN_TYPES, all_plain, direct_call_ok
from ._ops import add_op_namespace_prefix, ops
from .activation import NATIVE_DEVICE_TYPES, _eager_geglu, _geglu, _geglu_merged, _halves

# Imported only where triton is installed (the composition serves every call without
# it); any other import error in the kernel module surfaces as itself.
if importlib.util.find_spec("triton") is not None:
    from .triton_kernels import gemm as triton_gemm
else:
    triton_gemm = None

Tensor = torch.Tensor


# --------------------------------------------------------------------------- operands


class _GateUp(NamedTuple):
    """Separate [hidden, K] gate/up weights and [hidden] biases (views of merged ones)."""

    w_gate: Tensor
    w_up: Tensor
    b_gate: Optional[Tensor]
    b_up: Optional[Tensor]


def _split_gate_up(w_gate: Tensor, w_up: Optional[Tensor], b_gate, b_up) -> _GateUp:
    if w_up is not None:
        return _GateUp(w_gate, w_up, b_gate, b_up)
    hidden = w_gate.shape[0] // 2
    if b_gate is not None and b_up is None and b_gate.shape[0] == 2 * hidden:
        b_gate, b_up = b_gate[:hidden], b_gate[hidden:]
    return _GateUp(w_gate[:hidden], w_gate[hidden:], b_gate, b_up)


def _flatten_tokens(x: Tensor) -> Tensor:
    """x as [tokens, features]; a 2-d x as is (a reshape costs ~1 us of host time)."""
    return x if x.dim() == 2 else x.reshape(-1, x.shape[-1])


def _needs_grad(*tensors) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


# --------------------------------------------------------------------------- routes


def _composed_gate_up(
    x: Tensor, w_gate: Tensor, w_up: Optional[Tensor], b_gate, b_up, approximate: str, torch_ops: bool = False
) -> Tensor:
    """gelu(x @ w_gate.T + b_gate) * (x @ w_up.T + b_up) from torch's GEMMs and the
    package's geglu, differentiable through autograd. A merged weight runs as one GEMM
    writing [gate | up], whose halves geglu_merged reads in place. Autograd saves x and
    the pre-activations (2*M*hidden), against eager's gate, gelu(gate) and up.

    torch_ops: the GeGLU as torch's `F.gelu(gate) * up` instead of the package's op,
    for torch.compile with gradients (`_traced_with_grad`)."""
    if w_up is None:
        bias = b_gate
        hidden = w_gate.shape[0] // 2
        if b_up is not None or (b_gate is not None and b_gate.shape[0] == hidden):  # split biases
            bias = torch.cat([_or_zeros(b_gate, b_up), _or_zeros(b_up, b_gate)])
        pre = F.linear(x, w_gate, bias)
        return _eager_geglu(*_halves(pre), approximate) if torch_ops else _geglu_merged(pre, approximate)
    gate, up = F.linear(x, w_gate, b_gate), F.linear(x, w_up, b_up)
    return _eager_geglu(gate, up, approximate) if torch_ops else _geglu(gate, up, approximate)


def _traced_with_grad(*tensors) -> bool:
    """Whether torch.compile is tracing a call that needs gradients. Such a call is
    composed of torch's ops alone, on x as given, as the eager module computes it:
    F.linear, F.gelu, a product, F.linear (+ residual). Inductor then fuses the GeGLU
    into one pointwise kernel each way (the backward writing into the pre-activations'
    buffers), adds the two halves of x's gradient inside its next kernel, and picks
    what to save, as it does compiling the module alone; the package's ops would be
    opaque calls it can neither fuse nor plan memory around (docs/DESIGN.md,
    "Training")."""
    return torch.compiler.is_compiling() and _needs_grad(*tensors)


def _or_zeros(t: Optional[Tensor], like: Tensor) -> Tensor:
    return torch.zeros_like(like) if t is None else t


def _fused_gate_up_impl(
    x: Tensor, w_gate: Tensor, w_up: Tensor, b_gate: Optional[Tensor], b_up: Optional[Tensor], approximate: str
) -> Tensor:
    return triton_gemm.geglu_forward(x, w_gate, w_up, b_gate, b_up, approximate)


def _fused_gate_up_fake(x, w_gate, w_up, b_gate, b_up, approximate):
    return x.new_empty((x.shape[0], w_gate.shape[0]))


# The fused GEMM as an op (torch.compile traces ops, not Python; fake tensors use its
# fake). Inference only: a call that needs gradients takes the composition. A second
# import of the same build (one namespace) finds it registered.
if triton_gemm is not None and not hasattr(ops, "_geglu_linear_fused"):
    torch.library.custom_op(
        add_op_namespace_prefix("_geglu_linear_fused"), _fused_gate_up_impl, mutates_args=()
    ).register_fake(_fused_gate_up_fake)


def _fused_gate_up(x: Tensor, g: _GateUp, approximate: str) -> Optional[Tensor]:
    """The Triton fused gate/up GEMM for this call, or None where it does not run: not
    CUDA, no triton, an empty problem, an operand without unit column stride, or
    float32 while torch keeps float32 matmuls
    in full precision (the Triton kernel's float32 dot is TF32, which torch runs only
    when `torch.backends.cuda.matmul.allow_tf32` says so; its default is off)."""
    if x.device.type != "cuda" or 0 in (x.shape[0], x.shape[1], g.w_gate.shape[0]):
        return None
    if x.dtype == torch.float32 and not torch.backends.cuda.matmul.allow_tf32:
        return None
    if any(t.stride(-1) != 1 for t in (x, g.w_gate, g.w_up)):
        return None
    args = (x, *g, approximate)
    if triton_gemm is None:
        return None
    if direct_call_ok(*args[:5]):
        return _fused_gate_up_impl(*args)
    return ops._geglu_linear_fused(*args)


def _gate_up(x: Tensor, w_gate, w_up, b_gate, b_up, approximate: str) -> Tensor:
    """geglu_linear on [M, K] x by the Python route: the Triton fused GEMM in a variant
    without the native op (noarch) where no gradient is needed; else the composition,
    which is also what a compiled variant's native op runs where its engine does not
    serve, so tensor subclasses there take the same kernels as plain tensors."""
    if _NATIVE_MLP_FLAG is None and not _needs_grad(x, w_gate, w_up, b_gate, b_up):
        h = _fused_gate_up(x, _split_gate_up(w_gate, w_up, b_gate, b_up), approximate)
        if h is not None:
            return h
    return _composed_gate_up(x, w_gate, w_up, b_gate, b_up, approximate)


def _down_proj(h: Tensor, w_down: Tensor, b_down: Optional[Tensor], residual: Optional[Tensor]) -> Tensor:
    """h @ w_down.T + b_down + residual on cuBLAS: the residual as addmm's beta=1
    input when there is no bias (one op); with a bias, addmm(bias) + one in-place
    add, which moves less memory than addmm(residual) + add_(bias) (addmm first copies
    a 2-d input into its result)."""
    if residual is None:
        return F.linear(h, w_down, b_down)
    if b_down is None:
        return torch.addmm(residual, h, w_down.t())
    return F.linear(h, w_down, b_down).add_(residual)


# Compiled variants carry the per-layer native ops (geglu_kernels/ops/geglu_mlp.cpp,
# geglu_kernels/ops/linear_bias_gelu.cpp): checks, routing and launches in one C++ call.
_NATIVE_MLP_DEVICE_TYPES = NATIVE_DEVICE_TYPES if hasattr(ops, "_geglu_mlp") else frozenset()
# The same fact as a tensor flag ("is_cuda" / "is_cpu"; a build has one backend), read per
# call instead of x.device.type, which builds a torch.device on every read.
_NATIVE_MLP_FLAG = next((f"is_{t}" for t in sorted(_NATIVE_MLP_DEVICE_TYPES)), None)


def _register_fakes(fakes) -> None:
    """Registers the fake (shape) functions of this build's native ops, {op name: function}.
    A second import of the same build finds them registered by the first (torch raises
    RuntimeError) and keeps those."""
    for name, fake in fakes.items():
        try:
            torch.library.register_fake(add_op_namespace_prefix(name), fake)
        except RuntimeError:
            pass


def _geglu_mlp_fake(x, w_gate, w_up, w_down, b_gate, b_up, b_down, residual, approximate):
    """Shapes of _geglu_mlp under torch.compile / fake tensors, checked as the C++ op checks
    (so a bad call fails at trace time with the same message)."""
    _check_mlp(x, w_gate, w_up, w_down, b_gate, b_up, b_down, residual, approximate)
    return x.new_empty((*x.shape[:-1], w_down.shape[0]))


if _NATIVE_MLP_DEVICE_TYPES:
    _register_fakes({"_geglu_mlp": _geglu_mlp_fake})


# The native module trains through `_GegluMlpTrain`: torch's stable ABI has no
# autograd, so the autograd node is this Python Function around two native calls,
# `_geglu_mlp_train` (the forward, returning also what backward needs) and
# `_geglu_mlp_backward`. A plain autograd.Function, not torch.library.register_autograd
# on the op: the library's wrapper cost ~100 us more host time per forward
# (docs/DESIGN.md, "Alternatives that lost"). Only eager calls
# that need a gradient take it (mlp_layer_entry; torch.compile differentiates the
# composition): `_geglu_mlp` has no autograd kernel, which every inference call would
# pay (docs/DESIGN.md, "Stable ABI").


def _geglu_mlp_train_fake(x, w_gate, w_up, w_down, b_gate, b_up, b_down, residual, approximate):
    _check_mlp(x, w_gate, w_up, w_down, b_gate, b_up, b_down, residual, approximate)
    hidden = w_down.shape[1]
    m = math.prod(x.shape[:-1])
    return (
        x.new_empty((*x.shape[:-1], w_down.shape[0])),
        x.new_empty((m, 2 * hidden)),
        x.new_empty((m, hidden)),
    )


class _GegluMlpTrain(torch.autograd.Function):
    """geglu_mlp with gradients, as one native call each way: saves x, the
    pre-activations [gate | up] and h = gelu(gate) * up."""

    @staticmethod
    def forward(ctx, x, w_gate, w_up, w_down, b_gate, b_up, b_down, residual, approximate):
        y, pre, h = ops._geglu_mlp_train.default(x, w_gate, w_up, w_down, b_gate, b_up, b_down, residual, approximate)
        ctx.save_for_backward(x, w_gate, w_up, w_down, b_gate, b_up, pre, h)
        ctx.approximate = approximate
        return y

    @staticmethod
    def backward(ctx, grad):
        """`_geglu_mlp_backward`: the GeGLU backward kernel on the saved pre-activations,
        torch's GEMMs for the rest; the residual's gradient is grad."""
        x, w_gate, w_up, w_down, b_gate, b_up, pre, h = ctx.saved_tensors
        need = ctx.needs_input_grad
        if torch.is_grad_enabled():
            return _differentiable_mlp_backward(grad, need, x, w_gate, w_up, w_down, b_gate, b_up, ctx.approximate)
        needs = sum(1 << i for i in range(7) if need[i])
        g = grad.reshape(-1, grad.shape[-1])
        if not g.is_contiguous():
            g = g.contiguous()
        grads = ops._geglu_mlp_backward.default(g, _flatten_tokens(x), w_gate, w_up, w_down, b_gate, pre, h, needs, ctx.approximate)
        dx = grads[0] if grads[0] is None or x.dim() == 2 else grads[0].view(x.shape)
        return (dx, *grads[1:], grad if need[7] else None, None)


def _differentiable_mlp_backward(grad, need, x, w_gate, w_up, w_down, b_gate, b_up, approximate):
    """_GegluMlpTrain's gradients where autograd asked for a graph of the backward
    (create_graph=True; a backward runs in grad mode only then): the native backward
    has no derivative, so the composition is run again on the saved inputs and
    differentiated by autograd, which records that graph. b_down and the residual add to
    the output, so their gradients are grad's, whatever their values."""
    wrt = [t for t, n in zip((x, w_gate, w_up, w_down, b_gate, b_up), need) if n]
    y = _composed_mlp(x, w_gate, w_up, w_down, b_gate, b_up, None, None, approximate)
    grads = iter(torch.autograd.grad(y, wrt, grad, create_graph=True))
    first = [next(grads) if n else None for n in need[:6]]
    b_down_grad = grad.reshape(-1, grad.shape[-1]).sum(0) if need[6] else None
    return (*first, b_down_grad, grad if need[7] else None, None)


def _geglu_mlp_backward_fake(grad, x, w_gate, w_up, w_down, b_gate, pre, h, needs, approximate):
    hidden = w_down.shape[1]
    merged_bias = b_gate is not None and b_gate.shape[0] == 2 * hidden
    shapes = (
        x.shape,
        w_gate.shape,
        None if w_up is None else w_up.shape,
        w_down.shape,
        (2 * hidden,) if merged_bias else (hidden,),
        None if merged_bias else (hidden,),
        (grad.shape[-1],),
    )
    out = [grad.new_empty(shape) if needs >> i & 1 and shape is not None else None for i, shape in enumerate(shapes)]
    return tuple(out)


def _check_linear_bias_gelu(x, weight, bias, approximate) -> None:
    check_x(x)
    check_linear_operand("weight", weight, x, x.shape[-1])
    check_vector("bias", bias, x, weight.shape[0])
    check_approximate("approximate", approximate)


def _geglu_linear_fake(x, w_gate, w_up, b_gate, b_up, approximate):
    """Shapes of _geglu_linear (an inference op) under torch.compile / fake tensors."""
    hidden = _check_geglu_linear(x, w_gate, w_up, b_gate, b_up, approximate)
    return x.new_empty((*x.shape[:-1], hidden))


def _linear_bias_gelu_fake(x, weight, bias, approximate):
    """Shapes of _linear_bias_gelu (an inference op) under torch.compile / fake tensors."""
    _check_linear_bias_gelu(x, weight, bias, approximate)
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


if _NATIVE_MLP_DEVICE_TYPES:
    _register_fakes(
        {
            "_geglu_mlp_train": _geglu_mlp_train_fake,
            "_geglu_mlp_backward": _geglu_mlp_backward_fake,
            "_linear_bias_gelu": _linear_bias_gelu_fake,
            "_geglu_linear": _geglu_linear_fake,
        }
    )


def _native_call(x, tensors, approximate: str) -> bool:
    """Whether a call can run as the native op, which checks its own arguments: x's
    device has one and every argument is a plain tensor (or None: anything else takes
    the Python route, whose checks name it). The callers add the gradient's condition."""
    return _native_x(x, approximate) and all_plain(*tensors)


def _native_x(x, approximate) -> bool:
    """_native_call's conditions on x and approximate alone."""
    if _NATIVE_MLP_FLAG is None or type(x) not in PLAIN_TYPES or type(approximate) is not str:
        return False
    return getattr(x, _NATIVE_MLP_FLAG)


# --------------------------------------------------------------------------- public API


def linear_bias(x: Tensor, weight: Tensor, bias: Optional[Tensor]) -> Tensor:
    """x @ weight.T + bias (bias may be None) with the bias added in the GEMM epilogue.

    x: [..., in] float16/bfloat16/float32; weight: [out, in]; bias: [out]. Returns [..., out]."""
    check_x(x)
    check_linear_operand("weight", weight, x, x.shape[-1])
    check_vector("bias", bias, x, weight.shape[0])
    return F.linear(x, weight, bias)


def linear_bias_gelu(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None, approximate: str = "tanh") -> Tensor:
    """gelu(x @ weight.T + bias), with bias and tanh GELU in cuBLASLt's epilogue where it
    has one (see the module docstring).

    approximate: "tanh" (gelu_pytorch_tanh / gelu_new) or "none" (exact erf GELU).
    x: [..., in]; weight: [out, in]; bias: [out] or None. Returns [..., out]."""
    if weight is not None and _native_call(x, (weight, bias), approximate) and not _needs_grad(x, weight, bias):
        try:
            return ops._linear_bias_gelu.default(x, weight, bias, approximate)
        except RuntimeError:
            _refused_by_dispatcher(_check_linear_bias_gelu, x, weight, bias, approximate)
    _check_linear_bias_gelu(x, weight, bias, approximate)
    if (
        approximate == "tanh"
        and bias is not None
        and x.device.type == "cuda"
        and x.shape[-1] > 0  # with K == 0, _addmm_activation skips its GELU
        and not _needs_grad(x, weight, bias)
    ):
        # The GELU_BIAS epilogue is the tanh form (PyTorch's Blas.cpp applies the tanh
        # GELU itself where it cannot use the epilogue); CUDA only: the CPU
        # _addmm_activation applies the exact GELU.
        y = torch._addmm_activation(bias, _flatten_tokens(x), weight.t(), use_gelu=True)
        return y.reshape(*x.shape[:-1], weight.shape[0])
    return F.gelu(F.linear(x, weight, bias), approximate=approximate)


def geglu_linear(
    x: Tensor,
    w_gate: Tensor,
    w_up: Optional[Tensor] = None,
    b_gate: Optional[Tensor] = None,
    b_up: Optional[Tensor] = None,
    approximate: str = "tanh",
) -> Tensor:
    """gelu(x @ w_gate.T + b_gate) * (x @ w_up.T + b_up); without gradients on CUDA one
    kernel, whose x tiles feed a gate and an up accumulator and which writes only
    [..., hidden].

    w_gate, w_up: [hidden, in]. w_up=None: w_gate is a merged [2*hidden, in] gate/up
    weight (gate rows first), read in place; its bias is then either merged
    (b_gate [2*hidden], b_up None) or split (b_gate, b_up of [hidden]).
    Returns [..., hidden]."""
    operands = (w_gate, w_up, b_gate, b_up)
    if w_gate is not None and _native_call(x, operands, approximate) and not _needs_grad(x, *operands):
        try:
            return ops._geglu_linear.default(x, w_gate, w_up, b_gate, b_up, approximate)
        except RuntimeError:
            _refused_by_dispatcher(_check_geglu_linear, x, *operands, approximate)
    hidden = _check_geglu_linear(x, *operands, approximate)
    if _traced_with_grad(x, *operands):
        return _composed_gate_up(x, *operands, approximate, torch_ops=True)
    h = _gate_up(_flatten_tokens(x), w_gate, w_up, b_gate, b_up, approximate)
    return h if x.dim() == 2 else h.reshape(*x.shape[:-1], hidden)


def _check_geglu_linear(x, w_gate, w_up, b_gate, b_up, approximate) -> int:
    """geglu_linear's checks (the native op's, geglu_kernels/ops/gemm_checks.h, say the same); hidden."""
    check_x(x)
    hidden = check_gate_up(x, w_gate, w_up, b_gate, b_up)
    check_approximate("approximate", approximate)
    return hidden


def geglu_mlp(
    x: Tensor,
    w_gate: Tensor,
    w_up: Optional[Tensor],
    w_down: Tensor,
    biases: Optional[Tuple[Optional[Tensor], Optional[Tensor], Optional[Tensor]]] = None,
    residual: Optional[Tensor] = None,
    approximate: str = "tanh",
) -> Tensor:
    """down(gelu(gate(x)) * up(x)) [+ residual]: geglu_linear, then x_hidden @ w_down.T
    with b_down and the residual added by the down GEMM.

    w_gate, w_up: [hidden, in] (w_up=None: merged [2*hidden, in], see geglu_linear);
    w_down: [out, hidden]. biases: None or a 3-tuple (b_gate, b_up, b_down), each a
    tensor or None (b_gate may be a merged [2*hidden] bias with a merged weight).
    residual: None or a tensor of the output's shape [..., out], e.g. the block
    input for `x + mlp(x)`. Returns [..., out].

    Training saves x, the pre-activations [gate | up] and h = gelu(gate) * up, the down
    GEMM's input: 3*tokens*hidden elements against eager's 4."""
    if biases is None:
        biases = (None, None, None)
    if not isinstance(biases, (tuple, list)) or len(biases) != 3:
        raise TypeError(f"biases must be None or a tuple (b_gate, b_up, b_down), got {biases!r}")
    b_gate, b_up, b_down = biases
    # all_plain passes None (the optional arguments); a None weight takes the checked route.
    if w_gate is None or w_down is None or not all_plain(w_gate, w_up, w_down, b_gate, b_up, b_down, residual):
        return _composed_mlp(x, w_gate, w_up, w_down, b_gate, b_up, b_down, residual, approximate)
    return mlp_layer_entry(x, w_gate, w_up, w_down, b_gate, b_up, b_down, residual, approximate)


def mlp_layer_entry(x, w_gate, w_up, w_down, b_gate, b_up, b_down, residual, approximate) -> Tensor:
    """geglu_mlp with the biases as arguments, for weights, biases and a residual that
    are plain tensors or None: the layers' entry (their _linear_operands checked the
    types; geglu_mlp checks them with all_plain). Every check here is one a layer call
    pays on the host (docs/DESIGN.md, "Host time"), so only x and approximate are checked,
    and the requires-grad loop runs only in grad mode (not under no_grad / inference)."""
    if _native_x(x, approximate):
        try:
            # .default: the overload itself, without the packet's overload resolution per call.
            if not torch.is_grad_enabled() or not _needs_grad(x, w_gate, w_up, w_down, b_gate, b_up, b_down, residual):
                return ops._geglu_mlp.default(x, w_gate, w_up, w_down, b_gate, b_up, b_down, residual, approximate)
            # With gradients, the native autograd node runs in eager only: torch.compile
            # differentiates the composition (the node would hide the backward's kernels from
            # it), and an empty problem takes the composition too (autograd over torch's GEMMs).
            if not torch.compiler.is_compiling() and 0 not in (x.numel(), w_gate.numel(), w_down.numel()):
                return _GegluMlpTrain.apply(x, w_gate, w_up, w_down, b_gate, b_up, b_down, residual, approximate)
        except RuntimeError:
            _refused_by_dispatcher(_check_mlp, x, w_gate, w_up, w_down, b_gate, b_up, b_down, residual, approximate)
    return _composed_mlp(x, w_gate, w_up, w_down, b_gate, b_up, b_down, residual, approximate)


def _refused_by_dispatcher(check, *args) -> None:
    """Called in an `except RuntimeError` around a native op: where the dispatcher refused
    an argument before the op's own checks ran (a sparse or nested tensor has no kernel),
    the Python checks raise their error naming it; anything else re-raises as itself."""
    check(*args)
    raise


def _composed_mlp(x, w_gate, w_up, w_down, b_gate, b_up, b_down, residual, approximate) -> Tensor:
    """geglu_mlp from the package's Python routes (torch's GEMMs or the fused gate/up
    GEMM, then the down GEMM): where the native op does not serve, and for tensor
    subclasses, whose checks and dispatch happen here."""
    _check_mlp(x, w_gate, w_up, w_down, b_gate, b_up, b_down, residual, approximate)
    if _traced_with_grad(x, w_gate, w_up, w_down, b_gate, b_up, b_down, residual):
        y = F.linear(_composed_gate_up(x, w_gate, w_up, b_gate, b_up, approximate, torch_ops=True), w_down, b_down)
        return y if residual is None else y + residual
    x2 = _flatten_tokens(x)
    res = None if residual is None else _flatten_tokens(residual)
    y = _down_proj(_gate_up(x2, w_gate, w_up, b_gate, b_up, approximate), w_down, b_down, res)
    return y if x.dim() == 2 else y.reshape(*x.shape[:-1], w_down.shape[0])


def _check_mlp(x, w_gate, w_up, w_down, b_gate, b_up, b_down, residual, approximate) -> None:
    """geglu_mlp's checks (the native op's, geglu_kernels/ops/gemm_checks.h, say the same)."""
    check_x(x)
    hidden = check_gate_up(x, w_gate, w_up, b_gate, b_up)
    check_linear_operand("w_down", w_down, x, hidden)
    check_vector("b_down", b_down, x, w_down.shape[0])
    check_vector("residual", residual, x, (*x.shape[:-1], w_down.shape[0]))
    check_approximate("approximate", approximate)
