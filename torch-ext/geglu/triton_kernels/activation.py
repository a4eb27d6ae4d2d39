"""Triton kernels for GeGLU, gelu(gate) * up, and plain GELU: forward and backward.

Every tensor is a row-strided [rows, width] matrix (see `_checks.row_layout`), so the
two-tensor form, the merged form (gate = x[..., :d], up = x[..., d:], i.e. two views
of one buffer with row stride 2d) and the plain activation share one kernel each for
forward and backward. Storage is float32/float16/bfloat16; all math is float32.

Work split: a 1-D grid over [BLOCK_M, BLOCK_N] tiles (row blocks x column blocks).
Tiles hold ~4096 elements, so each thread keeps several 16-byte loads in flight;
one-row-per-program kernels (e.g. Liger's) starve the memory system on short rows.
`launch_config` and `_LAUNCH_TABLE` below are the only place launch parameters come
from. Sizes reach the kernel as plain ints: Triton specializes ints on "== 1" and
"divisible by 16" (the latter is what lets it emit 16-byte vector loads), and the
row count / column-block count are marked do_not_specialize, so a new shape compiles
a new kernel only when it changes the width bucket or that alignment class.

Offsets are computed in int64 (row index * row stride), so tensors of more than
2**31 elements index correctly (row and column counts themselves stay below 2**31).
Checked by compiling for sm_90 with triton 3.6 and 3.9: aligned shapes get 16-byte
ld/st.global.v4 for every operand.

The forward computes F.gelu with ATen's CUDA formula (GeluCUDAKernelImpl, in float32,
the same operations in the same order: `_gelu_eager`) and rounds like eager's
F.gelu(gate) * up: gelu to the storage dtype, then the product in float32, rounded
again. erf is `tl.math.erf`; tanh is one exp and one division (`_tanh`), within ~1e-7
of CUDA's tanhf, so the results are within the bounds the tests state rather than
eager's bits (libdevice's tanh cost a fifth of the bandwidth); kappa * x^3 + x is one
FMA, as nvcc contracts it for ATen. Under Triton's interpreter (TRITON_INTERPRET=1, used
by the CPU tests) erf is Python's, and, as its float32 -> bfloat16 cast truncates,
bfloat16 values are rounded to nearest by hand (`_round_bf16`) before they are cast
(so the CPU tests check eager's rounding). The
backward and the GEMM epilogue (`_gelu`, gemm.py) keep the cheaper sigmoid forms
(0.5 * (1 + tanh(z)) == sigmoid(2z)): they promise accuracy, not eager's bits.
"""

from contextlib import nullcontext
from typing import NamedTuple

import torch

from .._checks import row_layout

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only torch without triton: the package still imports.
    triton = None
    tl = None

HAS_TRITON = triton is not None


class LaunchConfig(NamedTuple):
    block_m: int  # rows per tile
    block_n: int  # columns per tile
    num_warps: int


# (width bucket, dtype) -> (BLOCK_M, BLOCK_N, num_warps). A width falls in the first
# bucket >= width; "wide" is every width above 128. Tiles are 4096 elements for 16-bit
# types and 2048 for float32 (8 KiB per tensor either way); narrow widths stack more
# rows per tile. Column tiles of 256 waste at most 255 idle lanes per row on widths
# that are not a multiple of 256, instead of up to half a tile with wider ones.
_WIDTH_BUCKETS = (16, 32, 64, 128)
# width bucket -> (BLOCK_M of the 16-bit types, BLOCK_M of float32, BLOCK_N); 4 warps.
_TILES = {16: (256, 128, 16), 32: (128, 64, 32), 64: (64, 32, 64), 128: (32, 16, 128), "wide": (16, 8, 256)}
_LAUNCH_TABLE = {
    (bucket, dtype): LaunchConfig(block_m32 if dtype == torch.float32 else block_m16, block_n, 4)
    for bucket, (block_m16, block_m32, block_n) in _TILES.items()
    for dtype in (torch.bfloat16, torch.float16, torch.float32)
}


def width_bucket(width: int):
    for bucket in _WIDTH_BUCKETS:
        if width <= bucket:
            return bucket
    return "wide"


def launch_config(width: int, dtype: torch.dtype) -> LaunchConfig:
    return _LAUNCH_TABLE[(width_bucket(width), dtype)]


def launch_grid(rows: int, width: int, cfg: LaunchConfig):
    """(grid, column blocks): one program per [BLOCK_M, BLOCK_N] tile, on grid axis 0
    (axis 0 allows 2**31 - 1 programs; axes 1 and 2 only 65535)."""
    col_blocks = triton.cdiv(width, cfg.block_n)
    return (triton.cdiv(rows, cfg.block_m) * col_blocks,), col_blocks


if HAS_TRITON:
    # 0.5 * (1 + tanh(z)) == sigmoid(2z), z = sqrt(2/pi) * (x + 0.044715 x^3):
    # gelu_tanh(x) = x * sigmoid(x * (_TANH_A + _TANH_B * x^2)).
    _TANH_A = tl.constexpr(1.5957691216057308)  # 2 * sqrt(2 / pi)
    _TANH_B = tl.constexpr(0.0713548162726009)  # 2 * sqrt(2 / pi) * 0.044715
    _TANH_DB = tl.constexpr(0.2140644488178027)  # d/dx of _TANH_B * x^3, divided by x^2
    _TANH_SATURATION = tl.constexpr(10.0)  # slope -2.5e-36 at -10, 1 + 2.5e-36 at 10
    _SQRT1_2 = tl.constexpr(0.7071067811865476)
    _INV_SQRT_2PI = tl.constexpr(0.3989422804014327)
    # ATen's tanh-GELU constants (double, rounded to float32 where they meet float32).
    _EAGER_BETA = tl.constexpr(0.7978845608028654)  # M_SQRT2 * M_2_SQRTPI * 0.5
    _EAGER_KAPPA = tl.constexpr(0.044715)

    @triton.jit
    def _sigmoid_pair(z):
        """(sigmoid(z), 1 - sigmoid(z)) = (1 / (1 + e), e / (1 + e)), e = exp(-z).

        Forming 1 - s as e * s keeps its relative accuracy where s rounds to ~1 (the
        backward multiplies it by large factors). z is clamped at -80 so e stays
        finite (no inf * 0); below that, s ~ 1.8e-35 is 0 for every use here."""
        e = tl.exp(-tl.maximum(z, -80.0))
        s = 1.0 / (1.0 + e)
        return s, e * s

    @triton.jit
    def _gelu(g, APPROXIMATE_TANH: tl.constexpr):
        if APPROXIMATE_TANH:
            s, _ = _sigmoid_pair(g * (_TANH_A + _TANH_B * g * g))
            # s is clamped at ~1.8e-35, so a huge negative g needs its exact -0 set
            # (g * s would be -5e3 at g = -3e38); g * 0 keeps eager's NaN at -inf.
            return tl.where(g < -_TANH_SATURATION, g * 0.0, g * s)
        else:
            return 0.5 * g * (1.0 + tl.math.erf(g * _SQRT1_2))

    @triton.jit
    def _tanh(y):
        """tanh of float32 y as (1 - e) / (1 + e), e = exp(-2|y|), the sign restored: one
        exp and one division, within ~1e-7 of tanhf (absolute), so gelu within the bounds
        of tests/kernels/test_activation_matches_eager.py. libdevice's tanh (eager's
        tanhf) held the forward to 69-79% of the copy bandwidth on an H100, 2026-11-27."""
        e = tl.exp(-2.0 * tl.abs(y))
        t = (1.0 - e) / (1.0 + e)
        return tl.where(y < 0.0, -t, t)

    @triton.jit
    def _round_bf16(y):
        """float32 y rounded to bfloat16 (to nearest, ties to even; NaN kept), as float32.
        For the interpreter, whose float32 -> bfloat16 cast truncates."""
        bits = y.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return tl.where(y != y, y, bits.to(tl.float32, bitcast=True))

    @triton.jit
    def _storage_value(y, dtype: tl.constexpr, INTERPRETED: tl.constexpr):
        """float32 y rounded to the storage dtype, as float32 (what a tensor of it holds)."""
        if INTERPRETED and dtype == tl.bfloat16:
            return _round_bf16(y)
        else:
            return y.to(dtype).to(tl.float32)

    @triton.jit
    def _gelu_eager(g, APPROXIMATE_TANH: tl.constexpr):
        """F.gelu(g) of float32 g in ATen's CUDA formula and operation order (tanh: `_tanh`)."""
        if APPROXIMATE_TANH:
            g_cube = g * g * g
            # g + kappa * g^3 as one FMA, as nvcc contracts ATen's (spelled out: Triton's
            # own contraction depends on its fp-fusion setting).
            inner = _EAGER_BETA * tl.fma(g_cube, _EAGER_KAPPA, g)
            y = 0.5 * g * (1.0 + _tanh(inner))
            # Below -10 gelu is -0 (as eager's); the line keeps a huge negative g there
            # whatever tanh gives, and g * 0 keeps eager's NaN at -inf.
            return tl.where(g < -_TANH_SATURATION, g * 0.0, y)
        else:
            return g * 0.5 * (1.0 + tl.math.erf(g * _SQRT1_2))

    @triton.jit
    def _gelu_and_grad(g, APPROXIMATE_TANH: tl.constexpr):
        """(gelu(g), d gelu / d g), float32."""
        if APPROXIMATE_TANH:
            s, one_minus_s = _sigmoid_pair(g * (_TANH_A + _TANH_B * g * g))
            act = g * s
            grad = s + act * one_minus_s * (_TANH_A + _TANH_DB * g * g)
            # Beyond |g| = 10, gelu and its slope are 0 and 0 (g < 0) or g and 1 (g > 0)
            # in float32; the formula is not: the clamped s times a huge g is not 0, and
            # g * g overflows (0 * inf). Comparisons, so a NaN g stays NaN. g * 0 and
            # g - g are -0 / +0 for a finite g and NaN at +-inf, where eager and float64
            # give NaN too: an overflow upstream stays visible.
            zero_or_nan = g - g
            act = tl.where(g < -_TANH_SATURATION, g * 0.0, act)
            grad = tl.where(g < -_TANH_SATURATION, zero_or_nan, tl.where(g > _TANH_SATURATION, 1.0 + zero_or_nan, grad))
        else:
            cdf = 0.5 * (1.0 + tl.math.erf(g * _SQRT1_2))
            act = g * cdf
            grad = cdf + g * tl.exp(-0.5 * g * g) * _INV_SQRT_2PI
        return act, grad

    @triton.jit
    def _tile(n_rows, n_cols, n_col_blocks, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
        """This program's [BLOCK_M, BLOCK_N] tile: int64 row indices (offsets past 2**31),
        column indices as a [1, BLOCK_N] row, and the in-bounds mask."""
        pid = tl.program_id(0)
        row_block = pid // n_col_blocks
        col_block = pid - row_block * n_col_blocks
        rows = row_block * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = col_block * BLOCK_N + tl.arange(0, BLOCK_N)
        mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
        return rows.to(tl.int64), cols[None, :], mask

    @triton.jit(do_not_specialize=["n_rows", "n_col_blocks"])
    def _forward_kernel(
        gate_ptr,
        up_ptr,
        out_ptr,
        n_rows,
        n_cols,
        n_col_blocks,
        gate_row_stride,
        up_row_stride,
        out_row_stride,
        APPROXIMATE_TANH: tl.constexpr,
        HAS_UP: tl.constexpr,  # False: plain gelu(gate), up_ptr is unused
        INTERPRETED: tl.constexpr,  # Triton's interpreter (its bf16 casts truncate)
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
    ):
        rows, cols, mask = _tile(n_rows, n_cols, n_col_blocks, BLOCK_M, BLOCK_N)

        dtype: tl.constexpr = out_ptr.dtype.element_ty
        g = tl.load(gate_ptr + (rows * gate_row_stride)[:, None] + cols, mask=mask, other=0.0)
        y = _gelu_eager(g.to(tl.float32), APPROXIMATE_TANH)
        if HAS_UP:
            u = tl.load(up_ptr + (rows * up_row_stride)[:, None] + cols, mask=mask, other=0.0)
            # Eager's F.gelu(gate) * up: gelu rounded to the storage dtype, then the product.
            y = _storage_value(y, dtype, INTERPRETED) * u.to(tl.float32)
        if INTERPRETED and dtype == tl.bfloat16:
            y = _round_bf16(y)  # the truncating cast below is then exact
        tl.store(out_ptr + (rows * out_row_stride)[:, None] + cols, y.to(dtype), mask=mask)

    @triton.jit(do_not_specialize=["n_rows", "n_col_blocks"])
    def _backward_kernel(
        grad_out_ptr,
        gate_ptr,
        up_ptr,
        grad_gate_ptr,
        grad_up_ptr,
        n_rows,
        n_cols,
        n_col_blocks,
        grad_out_row_stride,
        gate_row_stride,
        up_row_stride,
        grad_gate_row_stride,
        grad_up_row_stride,
        APPROXIMATE_TANH: tl.constexpr,
        INTERPRETED: tl.constexpr,  # Triton's interpreter (its bf16 casts truncate)
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
    ):
        rows, cols, mask = _tile(n_rows, n_cols, n_col_blocks, BLOCK_M, BLOCK_N)

        dy = tl.load(grad_out_ptr + (rows * grad_out_row_stride)[:, None] + cols, mask=mask, other=0.0)
        g = tl.load(gate_ptr + (rows * gate_row_stride)[:, None] + cols, mask=mask, other=0.0)
        u = tl.load(up_ptr + (rows * up_row_stride)[:, None] + cols, mask=mask, other=0.0)
        dy = dy.to(tl.float32)
        act, dact = _gelu_and_grad(g.to(tl.float32), APPROXIMATE_TANH)
        grad_gate = dy * u.to(tl.float32) * dact
        grad_up = dy * act
        if INTERPRETED and grad_gate_ptr.dtype.element_ty == tl.bfloat16:
            grad_gate, grad_up = _round_bf16(grad_gate), _round_bf16(grad_up)  # as in the forward
        tl.store(
            grad_gate_ptr + (rows * grad_gate_row_stride)[:, None] + cols,
            grad_gate.to(grad_gate_ptr.dtype.element_ty),
            mask=mask,
        )
        tl.store(
            grad_up_ptr + (rows * grad_up_row_stride)[:, None] + cols,
            grad_up.to(grad_up_ptr.dtype.element_ty),
            mask=mask,
        )


# --------------------------------------------------------------------------- launchers


def _interpreted() -> bool:
    """Whether the kernels run in Triton's interpreter (TRITON_INTERPRET=1 at import)."""
    return type(_forward_kernel).__name__ == "InterpretedFunction"


def _require_triton(t: torch.Tensor) -> None:
    if not HAS_TRITON:
        raise RuntimeError("geglu: the Triton path needs the `triton` package, which is not installed")
    if t.device.type != "cuda" and not _interpreted():
        raise RuntimeError(
            f"geglu: Triton kernels need CUDA tensors, got {t.device.type} (CPU tensors run only "
            "under the Triton interpreter: TRITON_INTERPRET=1 set before the package is imported)"
        )


def _rows(name: str, t: torch.Tensor):
    layout = row_layout(t)
    if layout is None:
        raise ValueError(f"{name}: expected a row-strided matrix, got shape {tuple(t.shape)} strides {t.stride()}")
    return layout


def _is_tanh(approximate: str) -> bool:
    if approximate not in ("tanh", "none"):
        raise ValueError(f"approximate must be one of ('tanh', 'none'), got {approximate!r}")
    return approximate == "tanh"


def _launch(kernel, tensors, rows: int, width: int, strides, **constexprs) -> None:
    """One launch of an elementwise kernel over [rows, width]: the launch table's tile
    for the width and dtype, on the tensors' device. Kernel arguments: the tensors,
    rows, width, column blocks, the row strides, then the compile-time constants."""
    like = tensors[0]
    _require_triton(like)
    cfg = launch_config(width, like.dtype)
    grid, col_blocks = launch_grid(rows, width, cfg)
    with torch.cuda.device(like.device) if like.device.type == "cuda" else nullcontext():
        kernel[grid](
            *tensors, rows, width, col_blocks, *strides,
            BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, num_warps=cfg.num_warps, **constexprs,
        )  # fmt: skip


def geglu_forward(out: torch.Tensor, gate: torch.Tensor, up, approximate: str) -> torch.Tensor:
    """out = gelu(gate) * up (up=None: out = gelu(gate)). All row-strided, one shape."""
    tanh = _is_tanh(approximate)
    rows, width, gate_stride = _rows("gate", gate)
    _, _, out_stride = _rows("out", out)
    up_stride = gate_stride if up is None else _rows("up", up)[2]
    if rows == 0 or width == 0:
        return out
    tensors = (gate, gate if up is None else up, out)
    _launch(_forward_kernel, tensors, rows, width, (gate_stride, up_stride, out_stride),
            APPROXIMATE_TANH=tanh, HAS_UP=up is not None, INTERPRETED=_interpreted())  # fmt: skip
    return out


def geglu_backward(
    grad_gate: torch.Tensor,
    grad_up: torch.Tensor,
    grad_out: torch.Tensor,
    gate: torch.Tensor,
    up: torch.Tensor,
    approximate: str,
) -> None:
    """grad_gate = grad_out * up * gelu'(gate); grad_up = grad_out * gelu(gate)."""
    tanh = _is_tanh(approximate)
    named = (("grad_out", grad_out), ("gate", gate), ("up", up), ("grad_gate", grad_gate), ("grad_up", grad_up))
    rows, width, _ = _rows("gate", gate)
    strides = [_rows(n, t)[2] for n, t in named]
    if rows == 0 or width == 0:
        return
    _launch(_backward_kernel, [t for _, t in named], rows, width, strides, APPROXIMATE_TANH=tanh,
            INTERPRETED=_interpreted())
