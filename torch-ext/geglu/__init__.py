"""geglu: GeGLU activations (exact and tanh GELU, forward and backward) and GEMMs
with bias/GELU/GeGLU in the epilogue, for CUDA (compiled + Triton) and CPU; and a
block-scaled FP8 GeGLU MLP and FP8 linear for inference."""

from pathlib import Path

from ._library_check import check_native_libraries

check_native_libraries(Path(__file__).parent)  # before `_ops` opens the library

from . import layers  # noqa: E402
from .activation import (  # noqa: E402
    geglu,
    geglu_backward,
    geglu_merged,
    gelu,
    gelu_and_mul,
    gelu_tanh,
    gelu_tanh_and_mul,
)
from .fp8_gemm import fp8_linear  # noqa: E402
from .fp8_mlp import geglu_mlp_fp8  # noqa: E402
from .linear import geglu_linear, geglu_mlp, linear_bias, linear_bias_gelu  # noqa: E402

__all__ = [
    "fp8_linear",
    "geglu",
    "geglu_backward",
    "geglu_merged",
    "geglu_linear",
    "geglu_mlp",
    "geglu_mlp_fp8",
    "gelu",
    "gelu_and_mul",
    "gelu_tanh",
    "gelu_tanh_and_mul",
    "layers",
    "linear_bias",
    "linear_bias_gelu",
]
