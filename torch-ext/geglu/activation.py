"""Public activation API: GeGLU (gelu(gate) * up) and GELU, forward and backward.

One dispatch point, `_backend`, picks the implementation per call from the device
of the input:
  * "native": the compiled op of this build, when the native module loaded with this
    variant has a kernel for that device type (the compiled CUDA variant: CUDA; the
    compiled CPU variant: CPU). Decided once at import, so torch.compile sees a constant.
  * "triton": CUDA tensors without a native CUDA kernel (the noarch `torch-cuda`
    variant, or the CPU variant on a CUDA torch): the Triton kernels of
    `triton_kernels/activation.py`, registered below as custom ops.
  * "eager": any other device (CPU tensors in the noarch or the CUDA variant): a
    composite of PyTorch ops computing the same float32 math. Correct, not fused.

Each call is validated once, with ValueError/TypeError naming the argument whichever
backend runs it: on the native route by the compiled op itself (C++,
geglu_kernels/common/tensor_checks.h; the op's fake implementation for meta and fake
tensors), elsewhere by the Python checks (`_checks`) before the Triton kernel or the
composite. The native route keeps the Python checks only for what the dispatcher
refuses before any kernel runs (a non-tensor or non-str argument, a device this build
has no kernel for): its message names the schema, the Python check names the problem.

Registrations (all through `add_op_namespace_prefix`, so two builds load side by side):
  * Triton custom ops (internal, `_`-prefixed names) _geglu_triton,
    _geglu_backward_triton, _geglu_merged_triton, _geglu_merged_backward_triton,
    _gelu_and_mul_triton, _gelu_triton, with fake (meta) implementations;
    _geglu_triton and _geglu_merged_triton are differentiable.
  * For the native ops (arch variants only): fakes for all six, autograd for `geglu`.
Importing the same build twice (one namespace) reuses the registrations of the first
import instead of failing on "already registered".
"""

from typing import Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from . import _checks
from .triton_kernels import activation as triton_activation
from ._fastpath import direct_call_ok
from ._ops import add_op_namespace_prefix, ops

# --------------------------------------------------------------------------- dispatch

_NATIVE_OPS = ("gelu_and_mul", "gelu_tanh_and_mul", "gelu", "gelu_tanh", "geglu", "geglu_backward")


def _op_defined(name: str) -> bool:
    return hasattr(ops, name)


def _native_device_types() -> frozenset:
    """Device types for which the native module has a kernel for every native op."""
    if not all(_op_defined(op) for op in _NATIVE_OPS):
        return frozenset()  # noarch variant: no native module
    found = set()
    for dispatch_key, device_type in (("CPU", "cpu"), ("CUDA", "cuda")):
        if all(
            torch._C._dispatch_has_kernel_for_dispatch_key(add_op_namespace_prefix(op), dispatch_key)
            for op in _NATIVE_OPS
        ):
            found.add(device_type)
    return frozenset(found)


NATIVE_DEVICE_TYPES = _native_device_types()


def _native(t) -> bool:
    """Whether a call routed by `t` goes to a compiled op (which checks its arguments)."""
    return isinstance(t, Tensor) and t.device.type in NATIVE_DEVICE_TYPES


def _under_functorch(*tensors) -> bool:
    """Whether a tensor is a functorch wrapper (torch.vmap's batched tensors), which
    has no storage for a kernel to read or write."""
    return any(isinstance(t, Tensor) and torch._C._functorch.is_functorch_wrapped_tensor(t) for t in tensors)


def _call_native(op, check, *args):
    """op(*args), validated by the op. Where the dispatcher refuses the call before
    the op runs (RuntimeError: an argument that is not a tensor / str, or on a device
    this build has no kernel for), `check` raises the Python check's clearer error."""
    try:
        return op(*args)
    except RuntimeError:
        check(*args)
        raise


def _backend(t: Tensor) -> str:
    """The single dispatch point: "native", "triton" or "eager" for tensors like `t`."""
    device_type = t.device.type
    if device_type in NATIVE_DEVICE_TYPES:
        return "native"
    if device_type == "cuda":
        return "triton"
    return "eager"


# --------------------------------------------------------------------------- helpers


def _as_rows(t: Tensor) -> Tensor:
    """`t` itself when it is a row-strided matrix, else a contiguous copy (internal
    inputs only, e.g. autograd's grad_out, which may be expanded or transposed)."""
    return t if _checks.row_layout(t) is not None else t.contiguous()


def _halves(x: Tensor) -> Tuple[Tensor, Tensor]:
    """gate = x[..., :d], up = x[..., d:]: views, row-strided whenever x is."""
    d = x.shape[-1] // 2
    return x[..., :d], x[..., d:]


def _merged_out_shape(x: Tensor) -> Tuple[int, ...]:
    return tuple(x.shape[:-1]) + (x.shape[-1] // 2,)


# GELU and its derivative in float32, for the eager composite. tanh form: the identity
# 0.5 * (1 + tanh(z)) == sigmoid(2z), as in the Triton and native kernels.
_TANH_A = 1.5957691216057308  # 2 * sqrt(2 / pi)
_TANH_B = 0.0713548162726009  # 2 * sqrt(2 / pi) * 0.044715
_SQRT1_2 = 0.7071067811865476
_INV_SQRT_2PI = 0.3989422804014327


# |g| at which the tanh form's sigmoid(z) is exactly 0 or 1 in float32 (|z| = 113).
_TANH_CLAMP = 12.0


def _eager_gelu_and_grad(g: Tensor, approximate: str) -> Tuple[Tensor, Tensor]:
    """(gelu(g), d gelu / d g) from differentiable torch ops (the backward of a
    double backward differentiates this)."""
    if approximate == "tanh":
        # At a clamped g, sigmoid is exactly 0 or 1 past the clamp, so gelu and its slope
        # are exactly 0 and 0 (g < 0) or g and 1 (g > 0); an unclamped g * g overflows
        # past 1.8e19 and the slope becomes 0 * inf = NaN. clamp keeps a NaN g, and its
        # gradient is 0 outside the range, as the slope's is (double backward). g - g
        # (0, or NaN at +-inf, where eager and float64 give NaN: 0 * inf) keeps an
        # overflow upstream visible in the slope.
        gc = g.clamp(-_TANH_CLAMP, _TANH_CLAMP)
        z = gc * (_TANH_A + _TANH_B * gc * gc)
        s = torch.sigmoid(z)
        # 1 - sigmoid(z) as sigmoid(-z): accurate where sigmoid(z) rounds to ~1.
        slope = s + gc * s * torch.sigmoid(-z) * (_TANH_A + 3.0 * _TANH_B * gc * gc)
        return g * s, slope + (g - g)
    cdf = 0.5 * (1.0 + torch.erf(g * _SQRT1_2))
    return g * cdf, cdf + g * torch.exp(-0.5 * g * g) * _INV_SQRT_2PI


def _eager_geglu(gate: Tensor, up: Tensor, approximate: str) -> Tensor:
    """Differentiable through PyTorch's own autograd. Eager's own ops in the storage
    dtype, so eager's bits: F.gelu rounded to the dtype, then the product."""
    return F.gelu(gate, approximate=approximate) * up


def _eager_geglu_backward(grad_out: Tensor, gate: Tensor, up: Tensor, approximate: str) -> Tuple[Tensor, Tensor]:
    """geglu's backward from torch ops: differentiable (double backward)."""
    act, dact = _eager_gelu_and_grad(gate.float(), approximate)
    dy = grad_out.float()
    return (dy * up.float() * dact).to(gate.dtype), (dy * act).to(up.dtype)


def _eager_geglu_merged_backward(grad_out: Tensor, x: Tensor, approximate: str) -> Tensor:
    return torch.cat(_eager_geglu_backward(grad_out, *_halves(x), approximate), dim=-1)


# --------------------------------------------------------------------------- Triton ops


def _geglu_triton(gate: Tensor, up: Tensor, approximate: str) -> Tensor:
    gate, up = _as_rows(gate), _as_rows(up)
    out = torch.empty(gate.shape, dtype=gate.dtype, device=gate.device)
    triton_activation.geglu_forward(out, gate, up, approximate)
    return out


def _geglu_triton_fake(gate: Tensor, up: Tensor, approximate: str) -> Tensor:
    return gate.new_empty(gate.shape)


def _geglu_backward_triton(grad_out: Tensor, gate: Tensor, up: Tensor, approximate: str) -> Tuple[Tensor, Tensor]:
    grad_gate = torch.empty(gate.shape, dtype=gate.dtype, device=gate.device)
    grad_up = torch.empty(up.shape, dtype=up.dtype, device=up.device)
    triton_activation.geglu_backward(
        grad_gate, grad_up, _as_rows(grad_out), _as_rows(gate), _as_rows(up), approximate
    )
    return grad_gate, grad_up


def _geglu_backward_fake(grad_out: Tensor, gate: Tensor, up: Tensor, approximate: str) -> Tuple[Tensor, Tensor]:
    return gate.new_empty(gate.shape), up.new_empty(up.shape)


def _geglu_merged_triton(x: Tensor, approximate: str) -> Tensor:
    _checks.check_even_last_dim("x", x)
    x = _as_rows(x)
    out = torch.empty(_merged_out_shape(x), dtype=x.dtype, device=x.device)
    gate, up = _halves(x)
    triton_activation.geglu_forward(out, gate, up, approximate)
    return out


def _geglu_merged_triton_fake(x: Tensor, approximate: str) -> Tensor:
    _checks.check_even_last_dim("x", x)
    return x.new_empty(_merged_out_shape(x))


def _geglu_merged_backward_triton(grad_out: Tensor, x: Tensor, approximate: str) -> Tensor:
    # One kernel writes both halves of grad_x: no torch.cat, no slice-backward zeros.
    x = _as_rows(x)
    grad_x = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    grad_gate, grad_up = _halves(grad_x)
    gate, up = _halves(x)
    triton_activation.geglu_backward(grad_gate, grad_up, _as_rows(grad_out), gate, up, approximate)
    return grad_x


def _geglu_merged_backward_fake(grad_out: Tensor, x: Tensor, approximate: str) -> Tensor:
    return x.new_empty(x.shape)


def _gelu_and_mul_triton(out: Tensor, x: Tensor, approximate: str) -> None:
    gate, up = _halves(_as_rows(x))
    triton_activation.geglu_forward(out, gate, up, approximate)


def _gelu_triton(out: Tensor, x: Tensor, approximate: str) -> None:
    triton_activation.geglu_forward(out, _as_rows(x), None, approximate)


def _mutating_fake(out: Tensor, x: Tensor, approximate: str) -> None:
    return None


def _save_inputs(ctx, inputs, output) -> None:
    """setup_context for ops whose inputs are (tensor..., approximate)."""
    ctx.save_for_backward(*inputs[:-1])
    ctx.approximate = inputs[-1]


# Double backward: autograd runs a backward in grad mode only when a graph of it was
# asked for (create_graph=True). The kernels' backward has no derivative of its own, so
# those calls take the composite of torch ops, which autograd differentiates again; every
# other backward runs the kernel.


def _geglu_triton_grad(ctx, grad: Tensor):
    gate, up = ctx.saved_tensors
    if torch.is_grad_enabled():
        grad_gate, grad_up = _eager_geglu_backward(grad, gate, up, ctx.approximate)
    else:
        grad_gate, grad_up = ops._geglu_backward_triton(grad, gate, up, ctx.approximate)
    return grad_gate, grad_up, None


def _geglu_merged_triton_grad(ctx, grad: Tensor):
    (x,) = ctx.saved_tensors
    if torch.is_grad_enabled():
        return _eager_geglu_merged_backward(grad, x, ctx.approximate), None
    return ops._geglu_merged_backward_triton(grad, x, ctx.approximate), None


def _register_triton_ops() -> None:
    def define(name, schema, impl, fake, mutates_args=()):
        op = torch.library.custom_op(add_op_namespace_prefix(name), impl, mutates_args=mutates_args, schema=schema)
        op.register_fake(fake)
        return op

    define(
        "_geglu_triton", "(Tensor gate, Tensor up, str approximate) -> Tensor", _geglu_triton, _geglu_triton_fake
    ).register_autograd(_geglu_triton_grad, setup_context=_save_inputs)
    define(
        "_geglu_backward_triton",
        "(Tensor grad_out, Tensor gate, Tensor up, str approximate) -> (Tensor, Tensor)",
        _geglu_backward_triton,
        _geglu_backward_fake,
    )
    define(
        "_geglu_merged_triton", "(Tensor x, str approximate) -> Tensor", _geglu_merged_triton, _geglu_merged_triton_fake
    ).register_autograd(_geglu_merged_triton_grad, setup_context=_save_inputs)
    define(
        "_geglu_merged_backward_triton",
        "(Tensor grad_out, Tensor x, str approximate) -> Tensor",
        _geglu_merged_backward_triton,
        _geglu_merged_backward_fake,
    )
    define(
        "_gelu_and_mul_triton",
        "(Tensor(a!) out, Tensor x, str approximate) -> ()",
        _gelu_and_mul_triton,
        _mutating_fake,
        mutates_args=("out",),
    )
    define(
        "_gelu_triton",
        "(Tensor(a!) out, Tensor x, str approximate) -> ()",
        _gelu_triton,
        _mutating_fake,
        mutates_args=("out",),
    )


# A second import of the same build (same namespace) finds the ops registered already.
if not _op_defined("_geglu_triton"):
    _register_triton_ops()


# --------------------------------------------------------------------------- native ops


# The fakes of the native ops run instead of their C++ kernels on meta and fake
# tensors (torch.compile tracing): they check the arguments as the kernels do.


def _native_geglu_fake(gate: Tensor, up: Tensor, approximate: str) -> Tensor:
    _check_geglu(gate, up, approximate)
    return gate.new_empty(gate.shape)


def _native_geglu_backward_fake(grad_out: Tensor, gate: Tensor, up: Tensor, approximate: str):
    _check_geglu_backward(grad_out, gate, up, approximate)
    return _geglu_backward_fake(grad_out, gate, up, approximate)


def _native_gelu_fake(out: Tensor, input: Tensor) -> None:
    _check_gelu_out(out, input, "input")


def _native_gelu_and_mul_fake(out: Tensor, input: Tensor) -> None:
    _check_gelu_and_mul_out(out, input, "input")


def _native_geglu_grad(ctx, grad: Tensor):
    gate, up = ctx.saved_tensors
    if torch.is_grad_enabled():  # create_graph=True: see _geglu_triton_grad
        grad_gate, grad_up = _eager_geglu_backward(grad, gate, up, ctx.approximate)
    else:
        grad_gate, grad_up = ops.geglu_backward(_as_rows(grad), gate, up, ctx.approximate)
    return grad_gate, grad_up, None


def _register_native_ops() -> None:
    for name in ("gelu_and_mul", "gelu_tanh_and_mul"):
        torch.library.register_fake(add_op_namespace_prefix(name), _native_gelu_and_mul_fake)
    for name in ("gelu", "gelu_tanh"):
        torch.library.register_fake(add_op_namespace_prefix(name), _native_gelu_fake)
    torch.library.register_fake(add_op_namespace_prefix("geglu"), _native_geglu_fake)
    torch.library.register_fake(add_op_namespace_prefix("geglu_backward"), _native_geglu_backward_fake)
    torch.library.register_autograd(
        add_op_namespace_prefix("geglu"), _native_geglu_grad, setup_context=_save_inputs
    )


# Only arch variants define native ops. A second import of the same build (e.g. via
# the `geglu/` compatibility package) finds the Autograd kernel registered already;
# registering again would fail on torch releases that refuse overrides.
if all(_op_defined(op) for op in _NATIVE_OPS) and not torch._C._dispatch_has_kernel_for_dispatch_key(
    add_op_namespace_prefix("geglu"), "Autograd"
):
    _register_native_ops()


class _GegluMergedNative(torch.autograd.Function):
    """geglu_merged over the native geglu op on the two halves of x; the backward
    writes grad_gate/grad_up with the native backward and joins them. Under torch.vmap
    both run per example through the ops' batching fallback (generated rule)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x: Tensor, approximate: str) -> Tensor:
        gate, up = _halves(x)
        return ops.geglu(gate, up, approximate)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        _save_inputs(ctx, inputs, output)

    @staticmethod
    def backward(ctx, grad: Tensor):
        (x,) = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph=True: see _geglu_triton_grad
            return _eager_geglu_merged_backward(grad, x, ctx.approximate), None
        gate, up = _halves(x)
        grad_gate, grad_up = ops.geglu_backward(_as_rows(grad), gate, up, ctx.approximate)
        return torch.cat([grad_gate, grad_up], dim=-1), None


# --------------------------------------------------------------------------- validation
# The Python checks: the routes without a compiled op (Triton, composite), the native
# ops' fakes, and the dispatcher's refusals on the native route (`_call_native`).


def _check_pair(gate: Tensor, up: Tensor) -> None:
    _checks.check_tensor("gate", gate)
    _checks.check_tensor("up", up)
    _checks.check_same_device("up", up, "gate", gate)
    _checks.check_same_dtype("up", up, "gate", gate)
    _checks.check_same_shape("up", up, "gate", gate)
    _checks.check_last_dim_stride("gate", gate)
    _checks.check_last_dim_stride("up", up)


def _check_geglu(gate: Tensor, up: Tensor, approximate: str) -> None:
    _checks.check_approximate("approximate", approximate)
    _check_pair(gate, up)


def _check_geglu_backward(grad_out: Tensor, gate: Tensor, up: Tensor, approximate: str) -> None:
    _check_geglu(gate, up, approximate)
    _checks.check_tensor("grad_out", grad_out)
    _checks.check_same_device("grad_out", grad_out, "gate", gate)
    _checks.check_same_dtype("grad_out", grad_out, "gate", gate)
    _checks.check_same_shape("grad_out", grad_out, "gate", gate)
    _checks.check_last_dim_stride("grad_out", grad_out)


def _check_input(name: str, x: Tensor, *, merged: bool) -> None:
    _checks.check_tensor(name, x)
    if merged:
        _checks.check_even_last_dim(name, x)
    _checks.check_last_dim_stride(name, x)


def _check_gelu_out(out: Tensor, x: Tensor, name: str = "x") -> None:
    _check_input(name, x, merged=False)
    _checks.check_out("out", out, shape=tuple(x.shape), like_name=name, like=x)
    _checks.check_no_partial_overlap("out", out, name, x, in_place=(x,))


def _check_gelu_and_mul_out(out: Tensor, x: Tensor, name: str = "x") -> None:
    _checks.check_not_swapped("out", out, name, x)
    _check_input(name, x, merged=True)
    _checks.check_out("out", out, shape=_merged_out_shape(x), like_name=name, like=x)
    _checks.check_no_partial_overlap("out", out, name, x, in_place=_halves(x))


# --------------------------------------------------------------------------- public API


def _check_no_autograd(op: str, out, x, approximate: str, merged: bool) -> None:
    """The out= functions write `out` outside autograd, so in grad mode they refuse, as
    eager torch's out= functions do, an `out` that requires grad (its graph would be
    silently overwritten; a leaf's data changed under the optimizer) and an `x` that
    requires grad (`out` would carry no gradient back to it)."""
    if isinstance(out, Tensor) and out.requires_grad:
        raise ValueError(
            f"{op}: out requires grad, and {op} writes it outside autograd; pass an output "
            "that does not require grad, or call under torch.no_grad()"
        )
    if isinstance(x, Tensor) and x.requires_grad:
        instead = f"geglu_merged(x, approximate={approximate!r})" if merged else (
            f"torch.nn.functional.gelu(x, approximate={approximate!r})"
        )
        raise ValueError(
            f"{op}: x requires grad, but {op} is not differentiable (it writes `out` outside "
            f"autograd); use {instead} for a result with a gradient, or call under torch.no_grad()"
        )


def _write_gelu(out: Tensor, x: Tensor, approximate: str, merged: bool) -> Tensor:
    """out = gelu(x) (merged: gelu(x[..., :d]) * x[..., d:]), the four out= functions.

    The write bumps `out`'s version counter, as an in-place torch op does, so a backward
    that saved `out` (or a view of its memory) before it was overwritten raises instead
    of using the new values. Under torch.compile the op's mutation is traced instead."""
    name = ("gelu_tanh" if approximate == "tanh" else "gelu") + ("_and_mul" if merged else "")
    if torch.is_grad_enabled():
        _check_no_autograd(name, out, x, approximate, merged)
    check = _check_gelu_and_mul_out if merged else _check_gelu_out
    if not torch.compiler.is_compiling() and _under_functorch(out, x):
        # torch.vmap (and the other functorch transforms) hand in tensors without
        # storage, which no kernel can address: eager's ops compute the same values and
        # copy_ writes the batched `out` (and bumps its version) as vmap expects. The
        # checks but the overlap one, which needs addresses (copy_ handles overlap).
        _check_input("x", x, merged=merged)
        shape = _merged_out_shape(x) if merged else tuple(x.shape)
        _checks.check_out("out", out, shape=shape, like_name="x", like=x)
        result = _eager_geglu(*_halves(x), approximate) if merged else F.gelu(x, approximate=approximate)
        return out.copy_(result)
    if _native(x):
        _call_native(getattr(ops, name), check, out, x)
    else:
        check(out, x)
        if _backend(x) == "triton":
            (ops._gelu_and_mul_triton if merged else ops._gelu_triton)(out, x, approximate)
        elif merged:
            out.copy_(_eager_geglu(*_halves(x), approximate))
        else:
            out.copy_(F.gelu(x, approximate=approximate))
    if not torch.compiler.is_compiling():
        torch.autograd.graph.increment_version(out)
    return out


def gelu_and_mul(out: Tensor, x: Tensor) -> Tensor:
    """out = gelu(x[..., :d]) * x[..., d:] with exact (erf) GELU; x [..., 2d], out [..., d].
    Writes `out` (row-strided allowed) and returns it. Not differentiable."""
    return _write_gelu(out, x, "none", merged=True)


def gelu_tanh_and_mul(out: Tensor, x: Tensor) -> Tensor:
    """As `gelu_and_mul`, with the tanh approximation of GELU."""
    return _write_gelu(out, x, "tanh", merged=True)


def gelu(out: Tensor, x: Tensor) -> Tensor:
    """out = gelu(x) (exact, erf), out of x's shape; returns `out`. Not differentiable."""
    return _write_gelu(out, x, "none", merged=False)


def gelu_tanh(out: Tensor, x: Tensor) -> Tensor:
    """out = gelu(x) with the tanh approximation; returns `out`. Not differentiable."""
    return _write_gelu(out, x, "tanh", merged=False)


def geglu(gate: Tensor, up: Tensor, approximate: str = "tanh") -> Tensor:
    """gelu(gate, approximate) * up, a new contiguous tensor of gate's shape.
    Differentiable with respect to gate and up, twice too; math in float32."""
    if _native(gate) and type(approximate) is str:
        return _call_native(ops.geglu, _check_geglu, gate, up, approximate)
    _check_geglu(gate, up, approximate)
    return _geglu(gate, up, approximate)


def _geglu(gate: Tensor, up: Tensor, approximate: str) -> Tensor:
    """geglu on checked arguments (the GEMM functions call this after their own checks)."""
    backend = _backend(gate)
    if backend == "native":
        return ops.geglu(gate, up, approximate)
    if backend == "triton":
        if direct_call_ok(gate, up):
            return _geglu_triton(gate, up, approximate)
        return ops._geglu_triton(gate, up, approximate)
    return _eager_geglu(gate, up, approximate)


def geglu_backward(
    grad_out: Tensor, gate: Tensor, up: Tensor, approximate: str = "tanh"
) -> Tuple[Tensor, Tensor]:
    """(grad_gate, grad_up) of geglu for the upstream gradient grad_out. Differentiable:
    where an argument requires grad (in grad mode) it runs as torch ops, as a gradient
    penalty needs; the kernels compute it otherwise."""
    differentiable = torch.is_grad_enabled() and any(
        isinstance(t, Tensor) and t.requires_grad for t in (grad_out, gate, up)
    )
    if _native(gate) and type(approximate) is str and not differentiable:
        return _call_native(ops.geglu_backward, _check_geglu_backward, grad_out, gate, up, approximate)
    _check_geglu_backward(grad_out, gate, up, approximate)
    backend = _backend(gate)
    if differentiable:
        grad_gate, grad_up = _eager_geglu_backward(grad_out, gate, up, approximate)
    elif backend == "triton" and direct_call_ok(grad_out, gate, up):
        grad_gate, grad_up = _geglu_backward_triton(grad_out, gate, up, approximate)
    elif backend == "triton":
        grad_gate, grad_up = ops._geglu_backward_triton(grad_out, gate, up, approximate)
    else:
        grad_gate, grad_up = _eager_geglu_backward(grad_out, gate, up, approximate)
    return grad_gate, grad_up


def geglu_merged(x: Tensor, approximate: str = "tanh") -> Tensor:
    """gelu(x[..., :d], approximate) * x[..., d:] for x = [..., 2d] (gate first), a new
    contiguous [..., d] tensor. Differentiable with respect to x. Checked in Python on
    every route: the native route runs the geglu op on views of x, whose own checks
    would name gate and up."""
    _checks.check_approximate("approximate", approximate)
    _check_input("x", x, merged=True)
    return _geglu_merged(x, approximate)


def _geglu_merged(x: Tensor, approximate: str) -> Tensor:
    """geglu_merged on checked arguments."""
    backend = _backend(x)
    if backend == "native":
        return _GegluMergedNative.apply(x, approximate)
    if backend == "triton":
        if direct_call_ok(x):
            return _geglu_merged_triton(x, approximate)
        return ops._geglu_merged_triton(x, approximate)
    gate, up = _halves(x)
    return _eager_geglu(gate, up, approximate)
