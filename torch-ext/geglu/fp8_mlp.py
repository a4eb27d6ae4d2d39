"""The block-scaled FP8 GeGLU MLP: `geglu_mlp_fp8`, for inference on FP8 weights in
the layout of Transformers' FineGrainedFP8 (DeepSeek-V3 style) checkpoints.

Semantics (the native kernels compute exactly this; `_composed_mlp_fp8` is the
reference):

- Weights are float8_e4m3fn in nn.Linear layout, w_gate / w_up [hidden, in] and
  w_down [out, hidden], each with float32 scales over 128x128 blocks, [rows/128,
  cols/128] (Transformers' `weight_scale_inv`): the weight means `w.float() * scale`,
  each scale broadcast over its block. in, hidden and out are multiples of 128.
- Activations (x, then h) are quantized per row in groups of 128 consecutive columns
  (`quantize_rows_1x128`): amax = max |v| over the group, scale = amax / 448 where
  amax > 0 (else 1.0), q = float8_e4m3fn(clamp(v / scale, -448, 448)) (round to nearest
  even, true division); q.float() * scale is the value the GEMM sees.
- gate = deq(x) @ deq(w_gate).T and up = deq(x) @ deq(w_up).T in float32; h = gelu(gate)
  * up in float32 (tanh or exact GELU); h is quantized as x was (1x128 groups along
  hidden); y = deq(h) @ deq(w_down).T in float32, + residual, rounded to x's dtype once.
- The fused kernels quantize h as h * (1 / scale), which differs from the quotient by
  at most one float32 ulp, and Hopper's FP8 MMA accumulates each 128-deep block at
  reduced precision: about 1% of h's bytes land one e4m3 step from this composite's,
  0.2-0.4% of the output (relative RMS) against 6.4% of quantization error.
- A group holding inf or NaN makes that row's output NaN (its scale is inf or NaN, so
  the group's quantized values are NaN); other rows are unaffected.

Inference only: the weights are frozen (as in Transformers' FP8Linear, whose weights
and scales get no gradient), so their requires_grad is ignored; an x or residual that
needs a gradient in grad mode raises (the layers run the module's own forward there,
which has FP8Linear's input gradient).

Where it runs: a compiled CUDA variant carries the native op `_geglu_mlp_fp8`
(geglu_kernels/ops/geglu_mlp_fp8.cpp), which a plain CUDA tensor takes on a GPU whose kernels
the backend has (it says which through `_geglu_mlp_fp8_serves`: the sm_90 engine);
everything else (CPU, other GPUs, the noarch variant, tensor subclasses) runs the
dequantizing composite in torch ops, which computes the same function.
"""

from typing import Optional, Tuple

import torch
import torch.nn.functional as F

from ._checks import check_approximate, check_same_device, check_shape, check_tensor
from ._fastpath import PLAIN_TYPES, all_plain
from ._ops import ops
from .linear import _refused_by_dispatcher, _register_fakes

Tensor = torch.Tensor

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0  # torch.finfo(torch.float8_e4m3fn).max
BLOCK = 128
ACTIVATION_DTYPES = (torch.float16, torch.bfloat16)
_DEVICE_TYPES = ("cuda", "cpu", "meta")


# --------------------------------------------------------------------------- the reference


def quantize_rows_1x128(v: Tensor) -> Tuple[Tensor, Tensor]:
    """(q, scale) for a [rows, cols] tensor (cols a multiple of 128): q float8_e4m3fn
    [rows, cols], scale float32 [rows, cols/128], so that q.float() * scale (each scale
    over its 128 columns) approximates v. The rule of the module docstring, in float32."""
    rows, cols = v.shape
    groups = v.float().reshape(rows, cols // BLOCK, BLOCK)
    amax = groups.abs().amax(dim=-1)
    # NaN > 0 is False: a NaN group gets scale 1 and keeps its NaN; an inf group gets an
    # inf scale and inf / inf = NaN. Either way the row's output is NaN.
    # amax / 448 correctly rounded, as the kernels compute it: on CUDA torch divides by a
    # Python scalar as a multiply by its reciprocal, one ulp off at times, which moves
    # exact ties of bf16 inputs (x / scale = 184.0, between e4m3's 176 and 192).
    scale = torch.where(amax > 0, amax / torch.full_like(amax, FP8_MAX), torch.ones_like(amax))
    q = (groups / scale.unsqueeze(-1)).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    return q.reshape(rows, cols), scale


def _dequantize_rows(q: Tensor, scale: Tensor) -> Tensor:
    rows, cols = q.shape
    return (q.float().reshape(rows, cols // BLOCK, BLOCK) * scale.unsqueeze(-1)).reshape(rows, cols)


def _dequantize_weight(w: Tensor, scale: Tensor) -> Tensor:
    """w.float() * scale over 128x128 blocks, in float32. detach: the weights are frozen,
    so no graph is recorded through them even where they require grad."""
    n, k = w.shape
    blocks = w.detach().float().reshape(n // BLOCK, BLOCK, k // BLOCK, BLOCK)
    return (blocks * scale.detach().reshape(n // BLOCK, 1, k // BLOCK, 1)).reshape(n, k)


def _fake_quantize_rows(v: Tensor) -> Tensor:
    return _dequantize_rows(*quantize_rows_1x128(v))


def _composed_mlp_fp8(
    x, w_gate, w_gate_scale, w_up, w_up_scale, w_down, w_down_scale, residual=None, approximate="tanh"
) -> Tensor:
    """geglu_mlp_fp8 in torch ops (any device): the weights dequantized to float32, the
    activations quantized and dequantized by the kernels' rule, float32 GEMMs. The
    reference the native kernels are tested against, and the route wherever they do
    not run."""
    _check_mlp_fp8(x, w_gate, w_gate_scale, w_up, w_up_scale, w_down, w_down_scale, residual, approximate)
    out_features = w_down.shape[0]
    x2 = x.reshape(-1, x.shape[-1])
    xq = _fake_quantize_rows(x2)
    gate = xq @ _dequantize_weight(w_gate, w_gate_scale).t()
    up = xq @ _dequantize_weight(w_up, w_up_scale).t()
    h = F.gelu(gate, approximate=approximate) * up
    y = _fake_quantize_rows(h) @ _dequantize_weight(w_down, w_down_scale).t()
    if residual is not None:
        y = y + residual.reshape(-1, out_features).float()
    return y.to(x.dtype).reshape(*x.shape[:-1], out_features)


# --------------------------------------------------------------------------- checks


def _check_multiple(name: str, what: str, size) -> None:
    if size % BLOCK:
        raise ValueError(
            f"{name}: {what} must be a multiple of {BLOCK} (the FP8 MLP quantizes in 128-wide blocks), got {size}"
        )


def _check_fp8_weight(name: str, w, x: Tensor, in_features, in_name: str) -> None:
    """A 2-d [rows, in_features] float8_e4m3fn weight on x's device, rows a multiple of 128."""
    check_tensor(name, w, dtypes=(FP8_DTYPE,))
    check_same_device(name, w, "x", x)
    if w.dim() != 2 or w.shape[1] != in_features:
        raise ValueError(
            f"{name} must be a 2-d [out_features, {in_features}] float8_e4m3fn weight (nn.Linear layout, "
            f"in_features = {in_name}), got shape {tuple(w.shape)}"
        )
    _check_multiple(name, "out_features (dim 0)", w.shape[0])


def _check_scale(name: str, scale, w_name: str, w: Tensor, x: Tensor) -> None:
    """float32 [rows/128, cols/128] block scales of weight `w`, on x's device."""
    check_tensor(name, scale, dtypes=(torch.float32,))
    check_same_device(name, scale, "x", x)
    expected = (w.shape[0] // BLOCK, w.shape[1] // BLOCK)
    if tuple(scale.shape) != expected:
        raise ValueError(
            f"{name} must have shape {expected} (one float32 scale per 128x128 block of {w_name} "
            f"{tuple(w.shape)}), got {tuple(scale.shape)}"
        )


def _check_activation(x, runs: str) -> int:
    """x of an FP8 op (`runs`: "the FP8 MLP", say): a float16/bfloat16 tensor on CUDA or
    CPU whose last dimension (in_features, returned) is a multiple of 128."""
    check_tensor("x", x, dtypes=ACTIVATION_DTYPES)
    if x.device.type not in _DEVICE_TYPES:
        raise ValueError(f"x is on {x.device}: {runs} runs on CUDA or CPU, not on {x.device.type}")
    k = x.shape[-1]
    _check_multiple("x", "the last dimension (in_features)", k)
    return k


def _check_residual(residual, x, n: int) -> None:
    """None, or [..., n] in x's dtype on x's device."""
    if residual is not None:
        check_tensor("residual", residual, dtypes=(x.dtype,))
        check_same_device("residual", residual, "x", x)
        check_shape("residual", residual, (*x.shape[:-1], n))


def _check_mlp_fp8(x, w_gate, w_gate_scale, w_up, w_up_scale, w_down, w_down_scale, residual, approximate) -> None:
    """geglu_mlp_fp8's argument checks (the native op's fake runs them too, so a bad call
    under torch.compile fails at trace time with the same message)."""
    k = _check_activation(x, "the FP8 MLP")
    _check_fp8_weight("w_gate", w_gate, x, k, "the last dim of x")
    _check_scale("w_gate_scale", w_gate_scale, "w_gate", w_gate, x)
    _check_fp8_weight("w_up", w_up, x, k, "the last dim of x")
    check_shape("w_up", w_up, tuple(w_gate.shape))
    _check_scale("w_up_scale", w_up_scale, "w_up", w_up, x)
    hidden = w_gate.shape[0]
    _check_fp8_weight("w_down", w_down, x, hidden, "hidden = w_gate.shape[0]")
    _check_scale("w_down_scale", w_down_scale, "w_down", w_down, x)
    _check_residual(residual, x, w_down.shape[0])
    check_approximate("approximate", approximate)


def _check_inference_only(x, residual, op: str = "geglu_mlp_fp8", none: str = "the FP8 MLP has") -> None:
    """The FP8 ops have no backward: refuse, naming the argument, a call of `op` whose x
    or residual needs a gradient (the weights are frozen: their requires_grad is ignored)."""
    if not torch.is_grad_enabled():
        return
    for name, t in (("x", x), ("residual", residual)):
        if isinstance(t, Tensor) and t.requires_grad:
            raise ValueError(
                f"{name} requires grad: {op} is inference-only (FP8 weights are frozen and {none} no "
                f"backward); call it under torch.no_grad() / torch.inference_mode(), or pass {name}.detach()"
            )


# --------------------------------------------------------------------------- the native op

_HAS_NATIVE_FP8 = hasattr(ops, "_geglu_mlp_fp8")
# device index -> whether the native op's kernels serve that GPU, as the op's
# `_geglu_mlp_fp8_serves` says (the backend decides: the sm_90 engine), asked once per
# device: a call per MLP call would cost microseconds of a decode step's host time.
_SERVED_DEVICES = {}


@torch.compiler.assume_constant_result
def _served_device_index(index: int) -> bool:
    """Whether CUDA device `index` runs the native op. Under torch.compile the answer is
    taken at trace time as a constant (the device of a compiled graph's inputs is guarded
    on), so the query is not traced."""
    served = _SERVED_DEVICES.get(index)
    if served is None:
        probe = torch.empty(0, device=torch.device("cuda", index))
        served = _SERVED_DEVICES[index] = bool(ops._geglu_mlp_fp8_serves.default(probe))
    return served


def _native_fp8_x(x) -> bool:
    """Whether a call with this x goes to the native op: the build has it, x is a plain
    CUDA tensor (linear.py's _native_x test) on a GPU the op's kernels serve."""
    if not _HAS_NATIVE_FP8 or type(x) not in PLAIN_TYPES or not x.is_cuda:
        return False
    return _served_device_index(x.get_device())


def _geglu_mlp_fp8_fake(x, w_gate, w_gate_scale, w_up, w_up_scale, w_down, w_down_scale, residual, approximate):
    """Shapes of _geglu_mlp_fp8 under torch.compile / fake tensors, checked as the op checks."""
    _check_mlp_fp8(x, w_gate, w_gate_scale, w_up, w_up_scale, w_down, w_down_scale, residual, approximate)
    return x.new_empty((*x.shape[:-1], w_down.shape[0]))


if _HAS_NATIVE_FP8:
    _register_fakes({"_geglu_mlp_fp8": _geglu_mlp_fp8_fake})


def _dense(t):
    return t if t is None or t.is_contiguous() else t.contiguous()


def _dense16(t):
    """t as the kernels read it: contiguous and 16-byte aligned (a copy where it is not;
    under torch.compile, whose buffers are aligned, contiguous only: addresses are not
    traced, and the op names a misaligned argument)."""
    if t is None:
        return None
    if torch.compiler.is_compiling():
        return t.contiguous()
    if not t.is_contiguous() or t.data_ptr() % 16:
        return t.clone(memory_format=torch.contiguous_format)
    return t


# --------------------------------------------------------------------------- public API


def geglu_mlp_fp8(
    x: Tensor,
    w_gate: Tensor,
    w_gate_scale: Tensor,
    w_up: Tensor,
    w_up_scale: Tensor,
    w_down: Tensor,
    w_down_scale: Tensor,
    residual: Optional[Tensor] = None,
    approximate: str = "tanh",
) -> Tensor:
    """down(gelu(gate(x)) * up(x)) [+ residual] on block-scaled FP8 weights (inference).

    x: [..., in] float16/bfloat16. w_gate, w_up: [hidden, in] and w_down: [out, hidden],
    float8_e4m3fn (nn.Linear layout); w_*_scale: their float32 [rows/128, cols/128]
    block scales (Transformers' `weight_scale_inv`: the weight is w.float() * scale).
    in, hidden and out must be multiples of 128. residual: None or [..., out] in x's
    dtype. approximate: "tanh" or "none" (exact GELU). Returns [..., out] in x's dtype.

    x and h = gelu(gate) * up are quantized to FP8 per row in 1x128 groups (scale =
    amax / 448); the GEMMs accumulate in float32 and the result is rounded once (the
    module docstring gives the exact rule). A row with inf or NaN in x gives a NaN row.
    Inference only: raises ValueError if grad mode is on and x or residual requires
    grad; the weights' requires_grad is ignored (they are frozen).
    """
    _check_inference_only(x, residual)
    args = (x, w_gate, w_gate_scale, w_up, w_up_scale, w_down, w_down_scale, residual, approximate)
    if type(approximate) is str and _native_fp8_x(x) and all_plain(*args[1:8]):
        try:
            # .default: the overload itself, without the packet's overload resolution per call.
            # The kernels read dense rows, x's and the residual's 16-byte aligned: a view that
            # is not runs as its copy (the weights, parameters, are aligned as allocated).
            weights = (_dense(t) for t in args[1:7])
            return ops._geglu_mlp_fp8.default(_dense16(x), *weights, _dense16(residual), approximate)
        except RuntimeError:
            _refused_by_dispatcher(_check_mlp_fp8, *args)
    return _composed_mlp_fp8(*args)
