"""The block-scaled FP8 GEMM: `fp8_linear`, for inference on one Transformers
`FP8Linear` (FineGrainedFP8) weight, on the FP8 MLP's engine.

Semantics (the native kernels compute exactly this; `_composed_fp8_linear` is the
reference), in the terms of fp8_mlp.py's module docstring:

- weight float8_e4m3fn [out, in] (nn.Linear layout), weight_scale_inv its float32
  [out/128, in/128] block scales; in and out multiples of 128.
- x is quantized per row in 1x128 groups (`quantize_rows_1x128`), and
  y = deq(q(x)) @ deq(weight).T in float32, + c, rounded to x's dtype once, where
  c = bias.to(x.dtype) + residual in x's dtype (either may be None). A row with inf or
  NaN in x gives a NaN row.
- The kernels: x's quantization (fp8_quantize_rows.cu), then the FP8 MLP's down GEMM
  (the CUTLASS block-scaled GEMM with c as its epilogue source); at 1-16 tokens one
  weight-streaming decode kernel that quantizes x itself (fp8_decode_sm90.cu, the same
  bits). A bias is added to the residual by one torch op before the call (Gemma's
  projections have none).

Inference only, as FP8Linear's weights are frozen: the weight, its scales and the bias
get no gradient (FP8Linear gives the bias none either), so their requires_grad is
ignored; an x or residual that needs a gradient in grad mode raises (the FP8Linear
layer runs the module's own forward there, which gives x its gradient).

Where it runs: the native op `_fp8_linear` on a plain CUDA tensor on a GPU the FP8
kernels serve (fp8_mlp._native_fp8_x: the sm_90 engine); everything else runs the
dequantizing composite in torch ops.
"""

from typing import Optional

import torch

from ._checks import check_same_device, check_shape, check_tensor
from ._fastpath import all_plain
from ._ops import ops
from .fp8_mlp import (
    _check_activation,
    _check_fp8_weight,
    _check_inference_only,
    _check_residual,
    _check_scale,
    _dense16,
    _dequantize_weight,
    _fake_quantize_rows,
    _native_fp8_x,
)
from .linear import _refused_by_dispatcher, _register_fakes

Tensor = torch.Tensor

_HAS_NATIVE = hasattr(ops, "_fp8_linear")
# A bias is cast to x's dtype (FP8Linear creates it float32; a load may cast it).
_BIAS_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _check_fp8_linear(x, weight, weight_scale_inv, bias, residual) -> None:
    """fp8_linear's argument checks (the native op's fake runs them too)."""
    k = _check_activation(x, "the FP8 linear")
    _check_fp8_weight("weight", weight, x, k, "the last dim of x")
    _check_scale("weight_scale_inv", weight_scale_inv, "weight", weight, x)
    n = weight.shape[0]
    if bias is not None:
        check_tensor("bias", bias, dtypes=_BIAS_DTYPES)
        check_same_device("bias", bias, "x", x)
        check_shape("bias", bias, (n,))
    _check_residual(residual, x, n)


def _epilogue_source(x: Tensor, n: int, bias, residual):
    """c = bias.to(x.dtype) + residual in x's dtype, [..., n], or None."""
    if bias is None:
        return residual
    b = bias.detach().to(x.dtype)
    return b.expand(*x.shape[:-1], n) if residual is None else residual + b


def _composed_fp8_linear(x, weight, weight_scale_inv, bias=None, residual=None) -> Tensor:
    """fp8_linear in torch ops (any device): the weight dequantized to float32, x
    quantized and dequantized by the kernels' rule, a float32 GEMM. The reference the
    native kernels are tested against, and the route wherever they do not run."""
    _check_fp8_linear(x, weight, weight_scale_inv, bias, residual)
    n = weight.shape[0]
    y = _fake_quantize_rows(x.reshape(-1, x.shape[-1])) @ _dequantize_weight(weight, weight_scale_inv).t()
    c = _epilogue_source(x, n, bias, residual)
    if c is not None:
        y = y + c.reshape(-1, n).float()
    return y.to(x.dtype).reshape(*x.shape[:-1], n)


def _fp8_linear_fake(x, weight, weight_scale, residual):
    """Shapes of _fp8_linear under torch.compile / fake tensors, checked as the op checks."""
    _check_fp8_linear(x, weight, weight_scale, None, residual)
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


if _HAS_NATIVE:
    _register_fakes({"_fp8_linear": _fp8_linear_fake})


def fp8_linear(
    x: Tensor,
    weight: Tensor,
    weight_scale_inv: Tensor,
    bias: Optional[Tensor] = None,
    residual: Optional[Tensor] = None,
) -> Tensor:
    """x @ deq(weight).T + bias + residual on a block-scaled FP8 weight (inference).

    x: [..., in] float16/bfloat16. weight: [out, in] float8_e4m3fn (nn.Linear layout);
    weight_scale_inv: its float32 [out/128, in/128] block scales (Transformers'
    `weight_scale_inv`: the weight is weight.float() * scale). in and out must be
    multiples of 128. bias: None or [out] float16/bfloat16/float32 (cast to x's dtype); residual: None or
    [..., out] in x's dtype. Returns [..., out] in x's dtype.

    x is quantized to FP8 per row in 1x128 groups (scale = amax / 448); the GEMM
    accumulates in float32 and the result is rounded once (the module docstring gives
    the exact rule). Inference only: raises ValueError if grad mode is on and x or
    residual requires grad; the weight's, scales' and bias's requires_grad is ignored.
    """
    _check_inference_only(x, residual, "fp8_linear", "it has")
    if _native_fp8_x(x) and all_plain(weight, weight_scale_inv, bias, residual):
        n = weight.shape[0] if weight.dim() == 2 else -1
        if bias is not None:  # checked as itself before it is folded into c
            _check_fp8_linear(x, weight, weight_scale_inv, bias, residual)
        try:
            c = _epilogue_source(x, n, bias, residual) if bias is not None else residual
            return ops._fp8_linear.default(_dense16(x), _dense16(weight), _dense16(weight_scale_inv), _dense16(c))
        except RuntimeError:
            _refused_by_dispatcher(_check_fp8_linear, x, weight, weight_scale_inv, bias, residual)
        except ValueError:
            # The op names its own arguments; a bias folded into c must be named as itself.
            _check_fp8_linear(x, weight, weight_scale_inv, bias, residual)
            raise
    return _composed_fp8_linear(x, weight, weight_scale_inv, bias, residual)
