"""Argument validation in Python, done once per call: of the GEMM functions, and of
the activation functions on the routes without a compiled op (Triton, the eager
composite; the native ops' fakes). On the native activation route the compiled op
checks its arguments itself (geglu_kernels/common/tensor_checks.h), with the same
cases and messages that name the op and the argument.

Each helper raises ValueError (TypeError for a non-tensor or a wrong Python type)
with a message that names the argument and says what was expected, before any
kernel sees the call.

The layout rule of every kernel in this package: a tensor is viewed as a
[rows, width] matrix without copying, which needs the last dimension to have
stride 1 and the leading dimensions to collapse to one row stride (>= width).
"""

from typing import Iterable, Optional, Tuple

import torch

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
APPROXIMATIONS = ("tanh", "none")


def _dtype_names(dtypes: Iterable[torch.dtype]) -> str:
    return "/".join(str(d).replace("torch.", "") for d in dtypes)


def check_tensor(
    name: str,
    t,
    *,
    dtypes: Iterable[torch.dtype] = FLOAT_DTYPES,
    device: Optional[torch.device] = None,
    min_dim: int = 1,
) -> None:
    """`t` is a tensor of one of `dtypes` (on `device` when given), with >= min_dim dims."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.is_nested or t.layout != torch.strided:
        kind = "a nested tensor" if t.is_nested else f"layout {t.layout}"
        raise ValueError(f"{name} must be a dense (strided) tensor, got {kind}")
    dtypes = tuple(dtypes)
    if t.dtype not in dtypes:
        raise ValueError(f"{name} must have dtype {_dtype_names(dtypes)}, got {t.dtype}")
    if device is not None and t.device != device:
        raise ValueError(f"{name} must be on device {device}, got {t.device}")
    if t.dim() < min_dim:
        raise ValueError(f"{name} must have at least {min_dim} dimension(s), got a {t.dim()}-d tensor")


def check_same_device(name: str, t: torch.Tensor, ref_name: str, ref: torch.Tensor) -> None:
    if t.device != ref.device:
        raise ValueError(f"{name} must be on the device of {ref_name} ({ref.device}), got {t.device}")


def check_same_dtype(name: str, t: torch.Tensor, ref_name: str, ref: torch.Tensor) -> None:
    if t.dtype != ref.dtype:
        raise ValueError(f"{name} must have the dtype of {ref_name} ({ref.dtype}), got {t.dtype}")


def check_same_shape(name: str, t: torch.Tensor, ref_name: str, ref: torch.Tensor) -> None:
    if t.shape != ref.shape:
        raise ValueError(f"{name} must have the shape of {ref_name} {tuple(ref.shape)}, got {tuple(t.shape)}")


def check_shape(name: str, t: torch.Tensor, shape: Tuple[int, ...]) -> None:
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(t.shape)}")


def check_even_last_dim(name: str, t: torch.Tensor) -> None:
    """Merged gate/up tensors hold [..., 2d]: gate = t[..., :d], up = t[..., d:]."""
    if t.shape[-1] % 2 != 0:
        raise ValueError(
            f"{name} must have an even last dimension (gate and up halves, [..., 2d]), got {t.shape[-1]}"
        )


def check_not_swapped(out_name: str, out, x_name: str, x) -> None:
    """A merged function called as f(x, out) instead of f(out, x): `out` then has x's
    leading dimensions and twice its width, which the shape checks would blame on one
    argument alone."""
    if not (isinstance(out, torch.Tensor) and isinstance(x, torch.Tensor)) or out.dim() != x.dim() or x.dim() == 0:
        return
    if out.shape[:-1] == x.shape[:-1] and x.shape[-1] > 0 and out.shape[-1] == 2 * x.shape[-1]:
        raise ValueError(
            f"{out_name} of shape {tuple(out.shape)} is twice as wide as {x_name} of shape {tuple(x.shape)}: "
            f"the arguments look swapped; the order is ({out_name}, {x_name}), with {x_name} [..., 2d] and "
            f"{out_name} [..., d]"
        )


def check_approximate(name: str, value) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, one of {APPROXIMATIONS}, got {type(value).__name__}")
    if value not in APPROXIMATIONS:
        raise ValueError(f"{name} must be one of {APPROXIMATIONS}, got {value!r}")


def row_layout(t: torch.Tensor) -> Optional[Tuple[int, int, int]]:
    """(rows, width, row_stride) when `t` is a row-strided [rows, width] matrix, else None.

    Size-1 dimensions impose nothing. Any other leading dimension must be exactly
    `size * stride` of the next one, so that one stride walks every row; the rows
    must not overlap (row_stride >= width), or writes would race."""
    width = t.shape[-1]
    rows = 1
    for s in t.shape[:-1]:
        rows *= s
    if width > 1 and t.stride(-1) != 1:
        return None
    row_stride = None
    expected = None
    for size, stride in zip(reversed(t.shape[:-1]), reversed(t.stride()[:-1])):
        if size == 1:
            continue
        if row_stride is None:
            row_stride = stride
        elif stride != expected:
            return None
        expected = stride * size
    if row_stride is None:  # a single row
        row_stride = width
    if rows > 1 and width > 0 and row_stride < width:
        return None
    return rows, width, row_stride


def check_last_dim_stride(name: str, t: torch.Tensor) -> None:
    """`t` is a row-strided matrix: last-dim stride 1, leading dims with one row stride."""
    if t.shape[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(
            f"{name} must have stride 1 in its last dimension, got strides {tuple(t.stride())} "
            f"for shape {tuple(t.shape)} (call .contiguous() first)"
        )
    if row_layout(t) is None:
        raise ValueError(
            f"{name} must be a row-strided matrix: its leading dimensions must collapse to one "
            f"row stride >= the last dimension, got strides {tuple(t.stride())} for shape "
            f"{tuple(t.shape)} (call .contiguous() first)"
        )


def check_out(name: str, out, *, shape: Tuple[int, ...], like_name: str, like: torch.Tensor) -> None:
    """An output buffer: a tensor of `shape` with the dtype and device of `like`, row-strided."""
    check_tensor(name, out)
    check_same_dtype(name, out, like_name, like)
    check_same_device(name, out, like_name, like)
    check_shape(name, out, shape)
    check_last_dim_stride(name, out)


def _byte_span(t: torch.Tensor) -> Tuple[int, int]:
    last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    return t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size()


def _same_view(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride()


def check_no_partial_overlap(out_name: str, out: torch.Tensor, x_name: str, x: torch.Tensor, in_place=()) -> None:
    """`out` shares no memory with `x`, or is exactly one of the `in_place` views (x
    itself, or a half of a merged x, which the kernels read element by element before
    writing it): any other overlap would read elements already written. As the
    compiled ops' check (tensor_checks.h); tensors without an address (fake, meta,
    subclasses under torch.compile) are not checked."""
    if type(out) is not torch.Tensor or type(x) is not torch.Tensor or out.device.type == "meta":
        return
    if torch.compiler.is_compiling() or out.numel() == 0 or x.numel() == 0:
        return
    (a0, a1), (b0, b1) = _byte_span(out), _byte_span(x)
    if a1 <= b0 or b1 <= a0 or any(_same_view(out, v) for v in in_place):
        return
    raise ValueError(
        f"{out_name} partially overlaps {x_name} in memory; pass a separate tensor"
        + (f" (or exactly {x_name} or one of its halves, to compute in place)" if in_place else "")
    )


# --------------------------------------------------------------------------- GEMM operands

GEMM_DEVICE_TYPES = ("cuda", "cpu", "meta")


def check_x(x) -> None:
    """The input of a GEMM function: a float tensor on a device the GEMMs serve."""
    check_tensor("x", x)
    if x.device.type not in GEMM_DEVICE_TYPES:
        raise ValueError(f"x is on {x.device}: the GEMM functions run on CUDA or CPU, not on {x.device.type}")


def check_linear_operand(name: str, w, x: torch.Tensor, in_features: int) -> None:
    """A 2-d [out_features, in_features] weight with x's dtype and device."""
    check_tensor(name, w)
    check_same_dtype(name, w, "x", x)
    check_same_device(name, w, "x", x)
    if w.dim() != 2 or w.shape[1] != in_features:
        raise ValueError(
            f"{name} must be a 2-d [out_features, {in_features}] weight (nn.Linear layout, "
            f"in_features = the last dim of its input), got shape {tuple(w.shape)}"
        )


def check_vector(name: str, t, x: torch.Tensor, shape) -> None:
    """An optional operand (bias: an int length; residual: a shape) with x's dtype and device."""
    if t is None:
        return
    check_tensor(name, t)
    check_same_dtype(name, t, "x", x)
    check_same_device(name, t, "x", x)
    # A length is an int, or a SymInt under torch.compile's dynamic shapes.
    check_shape(name, t, (shape,) if isinstance(shape, (int, torch.SymInt)) else shape)


def check_gate_up(x: torch.Tensor, w_gate, w_up, b_gate, b_up) -> int:
    """The gate/up operands of geglu_linear / geglu_mlp; returns hidden. w_up None: w_gate
    is a merged [2*hidden, in] weight (gate rows first) whose bias is merged or split."""
    k = x.shape[-1]
    check_linear_operand("w_gate", w_gate, x, k)
    if w_up is None:
        if w_gate.shape[0] % 2:
            raise ValueError(
                "w_gate must have an even number of rows when w_up is None (a merged "
                f"[2*hidden, in] gate/up weight, gate rows first), got shape {tuple(w_gate.shape)}"
            )
        hidden = w_gate.shape[0] // 2
        if b_gate is not None and b_up is None and b_gate.shape == (2 * hidden,):
            check_vector("b_gate", b_gate, x, 2 * hidden)  # merged bias
            return hidden
    else:
        hidden = w_gate.shape[0]
        check_linear_operand("w_up", w_up, x, k)
        check_shape("w_up", w_up, tuple(w_gate.shape))
    check_vector("b_gate", b_gate, x, hidden)
    check_vector("b_up", b_up, x, hidden)
    return hidden
