"""Fused GEMMs: bias / GELU / GeGLU in the epilogue, forward and backward.

Public functions (weights in nn.Linear layout, [out_features, in_features]; x has any
number of leading dimensions, flattened to [tokens, in_features]):

    linear_bias(x, weight, bias)                      x @ weight.T + bias
    linear_bias_gelu(x, weight, bias=None, approximate="tanh")
                                                      gelu(x @ weight.T + bias), one kernel
    geglu_linear(x, w_gate, w_up=None, b_gate=None, b_up=None, approximate="tanh")
                                                      gelu(x @ w_gate.T + b_gate) * (x @ w_up.T + b_up),
                                                      one kernel writing only [tokens, hidden]
    geglu_mlp(x, w_gate, w_up, w_down, biases=None, residual=None, approximate="tanh")
                                                      geglu_linear(...) @ w_down.T + b_down + residual

Merged gate/up weight: w_up=None means w_gate is [2*hidden, in] with the gate rows
first (a fused gate_up_proj); the kernel reads both halves in place by pointer offset.
Its bias may then be merged too (b_gate of shape [2*hidden], b_up=None) or split.

All functions are differentiable (x, weights, biases, residual) and are
torch.library custom ops with fake (meta) implementations, so torch.compile traces
them without graph breaks.

Who computes what: this package uses cuBLAS/cuBLASLt where cuBLAS is faster and its
own Triton kernels where fusing wins. One function, `_gemm_backend`, decides (below,
"Dispatch"); measured on an H100, bf16, microseconds, ours (Triton, launch table tuned
on that GPU) vs one cuBLAS GEMM of the same shape (benchmarks/results/tune_gemm_h100.log):
- linear_bias, and geglu_mlp's down projection (bias and/or residual epilogue) run on
  cuBLAS: torch.addmm(bias, x, w.T) (cuBLASLt bias epilogue), the residual as addmm's
  beta=1 input when there is no bias, else added in place after addmm(bias). Triton
  had nothing to fuse there and lost: 8192x768x3072 121 vs 59, 8192x4096x1024 139 vs
  114, 8192x6400x1600 277 vs 232, decode 16x3072x24576 243 vs 70, 256x4096x1024 165 vs 11.
- linear_bias_gelu, approximate="tanh" with a bias, on CUDA: cuBLASLt's bias+GELU
  epilogue, torch._addmm_activation(bias, x, w.T, use_gelu=True), which is the tanh
  GELU (PyTorch's Blas.cpp applies gelu(approximate="tanh") itself on the shapes where
  it cannot use the epilogue). Not on CPU: there _addmm_activation applies the exact
  erf GELU. Exact GELU (or no bias): cuBLAS + torch's elementwise GELU up to
  CUBLAS_GELU_MAX_TOKENS tokens, which is set past any real size because the Triton
  GELU-epilogue kernel measured slower at every size (2.8-15x at 16-256 tokens, 1.3x
  at the BERT/GPT-2 shapes); above it, the Triton kernel. Its backward GEMM
  follows the same token threshold (cuBLAS recompute + torch's gelu_backward below).
- geglu_linear and geglu_mlp's gate/up GEMM stay on Triton when no gradient is
  needed: one two-accumulator kernel beats cuBLAS GEMM + activation kernel
  (8192x3072x768: 154 vs 117 + ~56; 4096x24576x3072: 1652 vs 1552 + the activation
  pass, tools/tune_gemm.py's second H100 tune; decode 16x24576x3072: 115 vs 122).
  A forward that saves gate/up for backward runs them on cuBLAS (below).
- geglu_mlp's training backward through w_down runs grad @ w_down on cuBLAS and the
  GeGLU backward as the package's elementwise kernel (below); the fused Triton
  kernel with the GeGLU backward in its epilogue lost badly (8192x3072x768: 358 vs
  63 for the GEMM alone; 4096x24576x3072: 1977 vs 803) and stays available behind
  FUSED_SAVED_BACKWARD = True.
The transposed products of every backward (dX = dY @ W, dW = dY.T @ X) run on cuBLAS.

Devices and precision:
- CUDA: cuBLAS paths compute in the input dtype with float32 accumulation, exactly as
  torch's GEMMs (float32 follows torch.backends.cuda.matmul.allow_tf32); the Triton
  kernels take float16 / bfloat16 / float32 with float32 accumulation and one
  rounding of the result, float32 operands going through the tensor cores as TF32
  (~1e-3 relative error).
- CPU: plain (bias/residual) GEMMs and geglu_mlp's backward run the same torch ops
  as on CUDA (addmm/matmul + the package's CPU GeGLU kernels); the fused kinds run an
  eager torch composite of the same math in float32 (so layers work on CPU; no fused
  kernel, no speed claim). With TRITON_INTERPRET=1 set before the package is imported,
  float16/float32 CPU tensors run the Triton kernels in Triton's interpreter instead
  (used by the CPU tests; slow; bfloat16 stays on the composite, as the interpreter
  computes bfloat16 tl.dot wrongly).
- Any other device: ValueError.

Backward, memory against time (per layer of T tokens and hidden size H; eager
autograd keeps x plus gate, gelu(gate), up and h, i.e. 4*T*H elements):
- geglu_linear / geglu_mlp, when a gradient is needed (grad mode on and an input
  that requires grad), save x and the pre-activations [gate | up] (2*T*H elements);
  geglu_mlp also saves h = gelu(gate) * up (T*H, the down GEMM's input, which w_down's
  gradient needs): 3*T*H against eager's 4*T*H. Once gate/up are written out anyway,
  fusing the activation into the gate/up GEMM saves only their re-read, and cuBLAS's
  GEMMs are faster than the two-accumulator kernel, so this forward runs the gate/up
  GEMMs on cuBLAS into one [T, 2*H] tensor and the elementwise GeGLU kernel on its
  halves (TRAIN_GATE_UP_ON_CUBLAS = True; False: the fused Triton kernel writing h and
  [gate | up]). The backward runs grad_h = grad @ w_down on cuBLAS, the elementwise
  GeGLU backward on the saved halves (row-strided views, read in place) giving d_gate
  and d_up, and the transposed products on cuBLAS. H100, blog shape 8192x768x3072,
  one training step (benchmarks/results/profile_mlp_train_h100.log): GPU kernel time
  628-636 us against eager's 737-740 (the fused Triton forward: 654); the step itself
  is bound by the host issuing those kernels, which is why arch variants run all of it
  as one compiled op (geglu_mlp_cublas, below: no Python between the kernels) and
  eager autograd calls of the Python ops run as torch.autograd.Functions (_fastpath).
- FUSED_SAVED_BACKWARD = True (module attribute, read per call; Triton devices only):
  geglu_mlp's backward is instead one fused GEMM, grad @ w_down, whose epilogue applies
  the GeGLU backward to the saved gate/up and writes d_gate, d_up, h and the bias sums:
  no grad_h round trip, but slower on an H100 (above).
- RECOMPUTE_IN_BACKWARD = True (module attribute, read per call) trades time for
  memory instead: only x is saved, and the backward recomputes gate/up with one more
  two-accumulator GEMM of the forward's gate/up size (the "geglu_linear backward
  epilogue" kernel writes d_gate, d_up, h and the bias sums). Calls without gradients
  and the custom ops used directly always take this path.
- linear_bias_gelu saves x and recomputes the pre-activation in its backward GEMM
  (the GELU backward epilogue, or cuBLAS + gelu_backward, as in the forward);
  linear_bias saves x.
"""

import importlib.util
from typing import Optional, Tuple

import torch
import torch.nn.functional as F

from ._checks import check_approximate, check_same_device, check_same_dtype, check_shape, check_tensor
from ._fastpath import all_plain, autograd_function, direct_call_ok, eager_call_ok
from ._ops import add_op_namespace_prefix, ops
from .activation import NATIVE_DEVICE_TYPES, _eager_gelu_and_grad
from .activation import geglu as _geglu_elementwise
from .activation import geglu_backward as _geglu_backward_elementwise

# Imported only where triton is installed, so the package imports on a torch
# without it; any other import error in triton_gemm surfaces as itself.
if importlib.util.find_spec("triton") is not None:
    from . import triton_gemm
else:
    triton_gemm = None

Tensor = torch.Tensor

RECOMPUTE_IN_BACKWARD = False

# geglu_mlp's backward through w_down: False (default) runs grad @ w_down on cuBLAS and
# the GeGLU backward as the package's elementwise kernel; True runs the fused Triton
# kernel (GeGLU backward in the GEMM epilogue), which measured 2.5-5.7x slower on an
# H100 (see the module docstring). Kept for other GPUs and for the tuner.
FUSED_SAVED_BACKWARD = False

# Up to this many tokens (the launch table's m16/m64/m256 buckets) a single-weight
# GEMM with a GELU epilogue runs as cuBLAS + an elementwise GELU: the GEMM is bound
# by reading the weight, the Triton kernel measured 2.8-15x slower than cuBLAS there,
# and the extra pass over [M, N] is a few microseconds.
# Measured on an H100 at 8192 tokens too (benchmarks/results/mlp_h100.json): exact GELU
# at BERT-large 1024->4096, Triton GELU epilogue 202 us vs cuBLAS + GELU pass 154 us;
# GPT-2-XL 1600->6400, 388 vs 342. So no token count is routed to the Triton kernel;
# lower this to bring it back where a retune makes it win.
CUBLAS_GELU_MAX_TOKENS = 2**31

# The training forward (a gradient is needed, so gate/up are saved anyway): True runs
# gate/up as cuBLAS GEMMs into one [M, 2*hidden] buffer, then the package's elementwise
# GeGLU kernel on its halves; False runs the fused Triton kernel writing h and the
# pre-activations. Once gate/up are written out the fusion saves only their re-read,
# and cuBLAS's GEMM is faster than the two-accumulator kernel (benchmarks/compare_mlp.py
# times the training step both ways).
TRAIN_GATE_UP_ON_CUBLAS = True

_GELU_FOR = {"tanh": "gelu_tanh", "none": "gelu"}
_DEVICE_TYPES = ("cuda", "cpu", "meta")


# --------------------------------------------------------------------------- dispatch


def _triton_runs(device_type: str, dtype: torch.dtype) -> bool:
    """Whether the Triton kernels can run on tensors like these: CUDA (when triton is
    installed), and float16/float32 CPU tensors under the Triton interpreter (whose
    bfloat16 tl.dot is wrong in triton 3.9: bfloat16 stays eager)."""
    if triton_gemm is None:
        return False
    if device_type == "cuda":
        return True
    return device_type == "cpu" and dtype != torch.bfloat16 and triton_gemm.INTERPRET


def _gemm_backend(
    kind: str, device_type: str, dtype: torch.dtype, m: int, activation: str = "none", has_bias: bool = False
) -> str:
    """THE routing decision of this module: who computes a GEMM of `m` tokens.

    kind: "linear" (one weight; activation "none" | "gelu" | "gelu_tanh"),
    "linear_gelu_grad" (linear_bias_gelu's backward GEMM), "geglu" (the
    two-accumulator gate/up GEMM), "geglu_train" (the same when the forward saves
    gate/up for backward), "geglu_saved_grad" (geglu_mlp's backward through
    w_down). Returns
      "cublas": torch.addmm / torch.matmul / torch._addmm_activation (cuBLAS/cuBLASLt on
                CUDA, the same torch ops on CPU), plus an elementwise pass where needed;
      "triton": this package's fused Triton kernels;
      "eager":  the float32 torch composite (CPU without the Triton interpreter).
    Why (H100, bf16, microseconds, ours vs cuBLAS; module docstring): see each branch."""
    triton_ok = _triton_runs(device_type, dtype)
    if kind == "linear":
        if activation == "none":
            # Bias/residual only: nothing for a custom kernel to fuse that cuBLASLt's bias
            # epilogue / addmm's beta*C input do not, and cuBLAS is faster (8192x768x3072:
            # Triton 121 vs 59; decode 16x3072x24576: 243 vs 70).
            return "cublas"
        if device_type == "cuda":
            if activation == "gelu_tanh" and has_bias:
                return "cublas"  # cuBLASLt's bias+GELU epilogue is the tanh form (BERT 8192x4096x1024: 139 vs 114)
            if m <= CUBLAS_GELU_MAX_TOKENS or not triton_ok:
                return "cublas"  # GEMM + elementwise GELU; the Triton kernel is 2.8-15x slower here
        return "triton" if triton_ok else "eager"
    if kind == "linear_gelu_grad":
        if device_type == "cuda" and (m <= CUBLAS_GELU_MAX_TOKENS or not triton_ok):
            return "cublas"  # recompute the pre-activation with addmm, GELU'(pre) elementwise
        return "triton" if triton_ok else "eager"
    if kind == "geglu":
        # The fused gate/up GEMM beats GEMM + activation kernel (8192x3072x768: 154 vs
        # 117 + ~56 for the activation pass; decode 16x24576x3072: 117 vs 122).
        if device_type == "cuda" and not triton_ok:
            raise RuntimeError("geglu: the fused GeGLU GEMMs need the `triton` package on CUDA, which is not installed")
        return "triton" if triton_ok else "eager"
    if kind == "geglu_train":
        # Gate/up of a forward that saves them for backward (TRAIN_GATE_UP_ON_CUBLAS).
        if TRAIN_GATE_UP_ON_CUBLAS:
            return "cublas"
        return _gemm_backend("geglu", device_type, dtype, m)
    if kind == "geglu_saved_grad":
        # Fused backward epilogue 358 vs 63 (8192x3072x768) and 1977 vs 803
        # (4096x24576x3072) for the GEMM alone: cuBLAS + elementwise backward wins.
        return "triton" if FUSED_SAVED_BACKWARD and triton_ok else "cublas"
    raise ValueError(
        f"kind must be one of 'linear', 'linear_gelu_grad', 'geglu', 'geglu_train', 'geglu_saved_grad', got {kind!r}"
    )


def _backend_for(kind: str, x: Tensor, *weights: Tensor, activation: str = "none", has_bias: bool = False) -> str:
    """_gemm_backend for x ([M, K]) and the weights its GEMM reads; empty problems run
    the eager composite (no kernel launch for nothing; and torch._addmm_activation skips
    its activation when K == 0)."""
    if not _nonempty(x, *weights):
        return "eager"
    return _gemm_backend(kind, x.device.type, x.dtype, x.shape[0], activation, has_bias)


def _nonempty(x: Tensor, *weights: Tensor) -> bool:
    return x.shape[0] > 0 and x.shape[1] > 0 and all(w.shape[0] > 0 for w in weights)


def _gate_up(w_gate: Tensor, w_up: Optional[Tensor], b_gate: Optional[Tensor], b_up: Optional[Tensor]):
    """(w_gate, w_up, b_gate, b_up) as separate [hidden, ...] operands; a merged
    weight (w_up None) and a merged bias become views of their halves, not copies."""
    if w_up is not None:
        return w_gate, w_up, b_gate, b_up
    hidden = w_gate.shape[0] // 2
    if b_gate is not None and b_up is None and b_gate.shape[0] == 2 * hidden:
        b_gate, b_up = b_gate[:hidden], b_gate[hidden:]
    return w_gate[:hidden], w_gate[hidden:], b_gate, b_up


def _hidden(w_gate: Tensor, w_up: Optional[Tensor]) -> int:
    return w_gate.shape[0] if w_up is not None else w_gate.shape[0] // 2


# --------------------------------------------------------------------------- eager composite (CPU)


def _f32(t: Optional[Tensor]) -> Optional[Tensor]:
    return None if t is None else t.float()


def _eager_linear(x, weight, bias, residual, activation: str) -> Tensor:
    y = F.linear(x.float(), weight.float(), _f32(bias))
    if activation != "none":
        y = F.gelu(y, approximate="tanh" if activation == "gelu_tanh" else "none")
    if residual is not None:
        y = y + residual.float()
    return y.to(x.dtype)


def _eager_linear_gelu_grad(grad, x, weight, bias, approximate: str, bias_grad: bool):
    _, dact = _eager_gelu_and_grad(F.linear(x.float(), weight.float(), _f32(bias)), approximate)
    dpre = grad.float() * dact
    return dpre.to(x.dtype), (dpre.sum(0) if bias_grad else None)


def _eager_gate_up(x, w_gate, w_up, b_gate, b_up):
    x32 = x.float()
    return F.linear(x32, w_gate.float(), _f32(b_gate)), F.linear(x32, w_up.float(), _f32(b_up))


def _eager_geglu(x, w_gate, w_up, b_gate, b_up, approximate: str, want_pre: bool = False):
    """(h, [gate | up] pre-activations or None)."""
    g, u = _eager_gate_up(x, w_gate, w_up, b_gate, b_up)
    h = (F.gelu(g, approximate=approximate) * u).to(x.dtype)
    return h, (torch.cat([g, u], 1).to(x.dtype) if want_pre else None)


def _eager_geglu_grad_from(grad_h, g, u, approximate: str, want_h: bool, bias_grad: bool, dtype):
    """(d_gate_up, h or None, float32 bias sums or None) from float32 gate/up."""
    act, dact = _eager_gelu_and_grad(g, approximate)
    dh = grad_h.float()
    dgu = torch.cat([dh * u * dact, dh * act], dim=1)
    h = (act * u).to(dtype) if want_h else None
    return dgu.to(dtype), h, (dgu.sum(0) if bias_grad else None)


# --------------------------------------------------------------------------- cuBLAS (torch GEMMs)
# Results in x's dtype, float32 accumulation, as torch's own GEMMs (on CUDA they follow
# torch.backends.cuda.matmul: allow_tf32 for float32, the reduced-precision-reduction
# flags for float16/bfloat16).


def _cublas_linear(x: Tensor, weight: Tensor, bias: Optional[Tensor], residual: Optional[Tensor], activation: str) -> Tensor:
    """activation(x @ weight.T + bias) + residual with torch's GEMMs (x: [M, K])."""
    wt = weight.t()
    if activation == "gelu_tanh" and bias is not None and x.device.type == "cuda":
        # cuBLASLt's GELU_BIAS epilogue, which is the tanh form (PyTorch's Blas.cpp applies
        # gelu(approximate="tanh") itself where it cannot use the epilogue, e.g. M == 1).
        # CUDA only: the CPU _addmm_activation applies exact (erf) GELU.
        y = torch._addmm_activation(bias, x, wt, use_gelu=True)
    elif bias is None and residual is not None and activation == "none":
        # The residual as addmm's beta=1 input: one op (Blas.cpp copies it into the
        # result, then the GEMM accumulates onto it).
        return torch.addmm(residual, x, wt)
    else:
        # A 1-d bias goes through cuBLASLt's bias epilogue (free).
        y = x @ wt if bias is None else torch.addmm(bias, x, wt)
        if activation != "none":
            y = F.gelu(y, approximate="tanh" if activation == "gelu_tanh" else "none")
    if residual is not None:
        # Bias and residual: addmm(bias) + one in-place pass (reads y and residual,
        # writes y) moves less memory than addmm(residual) + add_(bias), since addmm
        # first copies a 2-d input into its result (Blas.cpp, non-Lt path).
        y.add_(residual)
    return y


def _cublas_gate_up(
    x: Tensor, w_gate: Tensor, w_up: Optional[Tensor], b_gate: Optional[Tensor], b_up: Optional[Tensor]
) -> Tensor:
    """[x @ w_gate.T + b_gate | x @ w_up.T + b_up] as one [M, 2*hidden] tensor (arguments
    as geglu_linear's: w_up None means a merged weight): one GEMM for a merged weight,
    else two GEMMs writing the column halves in place (cuBLAS takes the row stride as
    its ldc: no copy)."""
    if w_up is None:
        hidden = w_gate.shape[0] // 2
        bias = b_gate
        if b_up is not None or (b_gate is not None and b_gate.shape[0] == hidden):  # split biases: one [2*hidden]
            bias = torch.cat([_zeros_if_none(b_gate, b_up), _zeros_if_none(b_up, b_gate)])
        return x @ w_gate.t() if bias is None else torch.addmm(bias, x, w_gate.t())
    hidden = w_gate.shape[0]
    pre = x.new_empty((x.shape[0], 2 * hidden))
    for w, b, cols in ((w_gate, b_gate, pre[:, :hidden]), (w_up, b_up, pre[:, hidden:])):
        if b is None:
            torch.mm(x, w.t(), out=cols)
        else:
            torch.addmm(b, x, w.t(), out=cols)
    return pre


def _zeros_if_none(t: Optional[Tensor], like: Tensor) -> Tensor:
    return torch.zeros_like(like) if t is None else t


def _cublas_linear_gelu_grad(grad: Tensor, x: Tensor, weight: Tensor, bias: Optional[Tensor], approximate: str, bias_grad: bool):
    """(grad * gelu'(x @ weight.T + bias), float32 column sums or None): the pre-activation
    recomputed by one cuBLAS GEMM, then torch's fused gelu_backward kernel."""
    pre = x @ weight.t() if bias is None else torch.addmm(bias, x, weight.t())
    dpre = torch.ops.aten.gelu_backward(grad, pre, approximate=approximate)
    return dpre, (dpre.sum(0, dtype=torch.float32) if bias_grad else None)


def _cublas_geglu_saved_grad(grad: Tensor, pre: Tensor, w_down: Tensor, approximate: str, bias_grad: bool):
    """geglu_mlp's backward through w_down from the saved pre = [gate | up]:
    grad_h = grad @ w_down on cuBLAS, then the package's elementwise GeGLU backward
    (native CUDA/CPU op where the loaded variant has it, Triton otherwise). Returns
    (d_gate, d_up, float32 [2*hidden] bias sums or None)."""
    hidden = w_down.shape[1]
    gate, up = pre[:, :hidden], pre[:, hidden:]  # row-strided views, read in place by the kernels
    d_gate, d_up = _geglu_backward_elementwise(grad @ w_down, gate, up, approximate)
    dbias32 = None
    if bias_grad:
        dbias32 = torch.cat([d_gate.sum(0, dtype=torch.float32), d_up.sum(0, dtype=torch.float32)])
    return d_gate, d_up, dbias32


# --------------------------------------------------------------------------- custom ops
# All ops take x as [M, K]; the public functions flatten leading dimensions. Outputs
# computed only on request come back as empty tensors otherwise (ops return tensors).
# A second import of the same build (one namespace) reuses the first registration.


def _empty(like: Tensor, dtype=None) -> Tensor:
    return torch.empty((0,), device=like.device, dtype=dtype or like.dtype)


class _Op:
    """One registered custom op (`name`, with its fake, and autograd when given) plus
    the cheapest correct way to run it, chosen per call (see `_fastpath`): the
    implementation itself when nothing needs the op, the op's own autograd as a
    torch.autograd.Function in eager autograd, the op under compile, for fake/meta
    tensors and for tensor subclasses. `.op` is the registered overload. A second
    import of the same build (one namespace) reuses the first registration."""

    def __init__(self, name: str, impl, fake, backward=None, setup_context=None):
        if not hasattr(ops, name):
            op = torch.library.custom_op(add_op_namespace_prefix(name), impl, mutates_args=())
            op.register_fake(fake)
            if backward is not None:
                op.register_autograd(backward, setup_context=setup_context)
        self.op = getattr(ops, name).default
        self.impl = impl
        self.function = None if backward is None else autograd_function(name, impl, setup_context, backward)

    def __call__(self, *args):
        tensors = [a for a in args if isinstance(a, Tensor)]
        if direct_call_ok(*tensors):
            return self.impl(*args)
        if self.function is not None and eager_call_ok(*tensors):
            return self.function(*args)
        return self.op(*args)


def _linear_epilogue_impl(
    x: Tensor, weight: Tensor, bias: Optional[Tensor], residual: Optional[Tensor], activation: str
) -> Tensor:
    """activation(x @ weight.T + bias) + residual; activation: "none" | "gelu" | "gelu_tanh"."""
    return _linear(x, weight, bias, residual, activation)


def _linear(x: Tensor, weight: Tensor, bias: Optional[Tensor], residual: Optional[Tensor], activation: str) -> Tensor:
    backend = _backend_for("linear", x, weight, activation=activation, has_bias=bias is not None)
    if backend == "cublas":
        return _cublas_linear(x, weight, bias, residual, activation)
    if backend == "triton":
        return triton_gemm.linear_forward(x, weight, bias, residual, activation)
    return _eager_linear(x, weight, bias, residual, activation)


def _linear_epilogue_fake(x, weight, bias, residual, activation):
    return x.new_empty((x.shape[0], weight.shape[0]))


def _linear_gelu_grad_impl(
    grad: Tensor, x: Tensor, weight: Tensor, bias: Optional[Tensor], approximate: str, bias_grad: bool
) -> Tuple[Tensor, Tensor]:
    """(grad * gelu'(x @ weight.T + bias), float32 column sums of it if bias_grad else empty)."""
    backend = _backend_for("linear_gelu_grad", x, weight)
    if backend == "cublas":
        dpre, dbias = _cublas_linear_gelu_grad(grad, x, weight, bias, approximate, bias_grad)
    elif backend == "triton":
        dpre, dbias = triton_gemm.linear_gelu_backward(grad, x, weight, bias, approximate, bias_grad)
    else:
        dpre, dbias = _eager_linear_gelu_grad(grad, x, weight, bias, approximate, bias_grad)
    return dpre, _empty(x, torch.float32) if dbias is None else dbias


def _linear_gelu_grad_fake(grad, x, weight, bias, approximate, bias_grad):
    n = weight.shape[0]
    return x.new_empty((x.shape[0], n)), x.new_empty((n if bias_grad else 0,), dtype=torch.float32)


def _geglu_linear_impl(
    x: Tensor,
    w_gate: Tensor,
    w_up: Optional[Tensor],
    b_gate: Optional[Tensor],
    b_up: Optional[Tensor],
    approximate: str,
) -> Tensor:
    """gelu(x @ w_gate.T + b_gate) * (x @ w_up.T + b_up); w_up None: merged weight."""
    wg, wu, bg, bu = _gate_up(w_gate, w_up, b_gate, b_up)
    if _backend_for("geglu", x, wg) == "triton":
        return triton_gemm.geglu_forward(x, wg, wu, bg, bu, approximate)
    return _eager_geglu(x, wg, wu, bg, bu, approximate)[0]


def _geglu_linear_fake(x, w_gate, w_up, b_gate, b_up, approximate):
    return x.new_empty((x.shape[0], _hidden(w_gate, w_up)))


def _geglu_linear_train_impl(
    x: Tensor,
    w_gate: Tensor,
    w_up: Optional[Tensor],
    b_gate: Optional[Tensor],
    b_up: Optional[Tensor],
    approximate: str,
) -> Tuple[Tensor, Tensor]:
    """(h, pre): geglu_linear that also returns the pre-activations [gate | up]
    ([M, 2*hidden]) it saves for backward: cuBLAS gate/up GEMMs + the elementwise GeGLU
    (TRAIN_GATE_UP_ON_CUBLAS), or one fused Triton kernel writing both."""
    wg, wu, bg, bu = _gate_up(w_gate, w_up, b_gate, b_up)
    backend = _backend_for("geglu_train", x, wg)
    if backend == "cublas":
        pre = _cublas_gate_up(x, w_gate, w_up, b_gate, b_up)
        hidden = wg.shape[0]
        return _geglu_elementwise(pre[:, :hidden], pre[:, hidden:], approximate), pre
    if backend == "triton":
        pre = x.new_empty((x.shape[0], 2 * wg.shape[0]))
        return triton_gemm.geglu_forward(x, wg, wu, bg, bu, approximate, pre=pre), pre
    return _eager_geglu(x, wg, wu, bg, bu, approximate, want_pre=True)


def _geglu_linear_train_fake(x, w_gate, w_up, b_gate, b_up, approximate):
    hidden = _hidden(w_gate, w_up)
    return x.new_empty((x.shape[0], hidden)), x.new_empty((x.shape[0], 2 * hidden))


def _geglu_linear_grad_impl(
    grad_h: Tensor,
    x: Tensor,
    w_gate: Tensor,
    w_up: Optional[Tensor],
    b_gate: Optional[Tensor],
    b_up: Optional[Tensor],
    approximate: str,
    want_h: bool,
    bias_grad: bool,
) -> Tuple[Tensor, Tensor, Tensor]:
    """Recomputes gate/up from x: (d_gate_up [M, 2*hidden] (gate columns first),
    h = gelu(gate) * up if want_h else empty, float32 [2*hidden] bias grads if bias_grad else empty)."""
    wg, wu, bg, bu = _gate_up(w_gate, w_up, b_gate, b_up)
    if _backend_for("geglu", x, wg) == "triton":  # the two-accumulator kernel, backward epilogue
        dgu, h, dbias = triton_gemm.geglu_backward(grad_h, x, wg, wu, bg, bu, approximate, want_h, bias_grad)
    else:
        g, u = _eager_gate_up(x, wg, wu, bg, bu)
        dgu, h, dbias = _eager_geglu_grad_from(grad_h, g, u, approximate, want_h, bias_grad, x.dtype)
    return dgu, _empty(x) if h is None else h, _empty(x, torch.float32) if dbias is None else dbias


def _geglu_grad_fake(m: int, hidden: int, like: Tensor, want_h: bool, bias_grad: bool):
    return (
        like.new_empty((m, 2 * hidden)),
        like.new_empty((m, hidden) if want_h else (0,)),
        like.new_empty((2 * hidden if bias_grad else 0,), dtype=torch.float32),
    )


def _geglu_linear_grad_fake(grad_h, x, w_gate, w_up, b_gate, b_up, approximate, want_h, bias_grad):
    return _geglu_grad_fake(x.shape[0], _hidden(w_gate, w_up), x, want_h, bias_grad)


def _geglu_mlp_impl(
    x: Tensor,
    w_gate: Tensor,
    w_up: Optional[Tensor],
    w_down: Tensor,
    b_gate: Optional[Tensor],
    b_up: Optional[Tensor],
    b_down: Optional[Tensor],
    residual: Optional[Tensor],
    approximate: str,
) -> Tensor:
    """geglu_linear(x, ...) @ w_down.T + b_down + residual: two fused GEMMs; the
    [M, hidden] intermediate is a temporary."""
    h = _geglu_linear_impl(x, w_gate, w_up, b_gate, b_up, approximate)
    return _linear(h, w_down, b_down, residual, "none")


def _geglu_mlp_fake(x, w_gate, w_up, w_down, b_gate, b_up, b_down, residual, approximate):
    return x.new_empty((x.shape[0], w_down.shape[0]))


def _geglu_mlp_train_impl(
    x: Tensor,
    w_gate: Tensor,
    w_up: Optional[Tensor],
    w_down: Tensor,
    b_gate: Optional[Tensor],
    b_up: Optional[Tensor],
    b_down: Optional[Tensor],
    residual: Optional[Tensor],
    approximate: str,
) -> Tuple[Tensor, Tensor, Tensor]:
    """(y, pre, h): geglu_mlp that also returns what it saves for backward, the
    pre-activations [gate | up] and h = gelu(gate) * up (the down GEMM's input)."""
    h, pre = _geglu_linear_train_impl(x, w_gate, w_up, b_gate, b_up, approximate)
    return _linear(h, w_down, b_down, residual, "none"), pre, h


def _geglu_mlp_train_fake(x, w_gate, w_up, w_down, b_gate, b_up, b_down, residual, approximate):
    hidden = _hidden(w_gate, w_up)
    m = x.shape[0]
    return x.new_empty((m, w_down.shape[0])), x.new_empty((m, 2 * hidden)), x.new_empty((m, hidden))


def _geglu_mlp_grad_impl(
    grad: Tensor, pre: Tensor, w_down: Tensor, approximate: str, want_h: bool, bias_grad: bool
) -> Tuple[Tensor, Tensor, Tensor]:
    """geglu_mlp backward through w_down in one GEMM (FUSED_SAVED_BACKWARD): grad_h =
    grad @ w_down with the GeGLU backward applied to the saved pre = [gate | up] in the
    epilogue. Returns
    (d_gate_up, h if want_h else empty, float32 bias sums if bias_grad else empty)."""
    if _triton_runs(grad.device.type, grad.dtype) and _nonempty(grad, w_down.t()):
        dgu, h, dbias = triton_gemm.geglu_saved_backward(grad, pre, w_down, approximate, want_h, bias_grad)
    else:
        hidden = w_down.shape[1]
        grad_h = grad.float() @ w_down.float()
        g, u = pre[:, :hidden].float(), pre[:, hidden:].float()
        dgu, h, dbias = _eager_geglu_grad_from(grad_h, g, u, approximate, want_h, bias_grad, grad.dtype)
    return dgu, _empty(grad) if h is None else h, _empty(grad, torch.float32) if dbias is None else dbias


def _geglu_mlp_grad_fake(grad, pre, w_down, approximate, want_h, bias_grad):
    return _geglu_grad_fake(grad.shape[0], w_down.shape[1], grad, want_h, bias_grad)


# --------------------------------------------------------------------------- autograd


def _linear_epilogue_setup(ctx, inputs, output):
    x, weight, bias, residual, activation = inputs
    ctx.activation = activation
    ctx.save_for_backward(x, weight, bias)


def _linear_epilogue_backward(ctx, grad):
    x, weight, bias = ctx.saved_tensors
    need_x, need_w, need_b, need_res, _ = ctx.needs_input_grad
    dbias = None
    if ctx.activation == "none":
        dpre = grad
        if need_b:
            dbias = grad.sum(0)
    else:
        approximate = "tanh" if ctx.activation == "gelu_tanh" else "none"
        dpre, dbias32 = _linear_gelu_grad(grad, x, weight, bias, approximate, need_b)
        if need_b:
            dbias = dbias32.to(bias.dtype)
    dx = dpre @ weight if need_x else None
    dw = dpre.t() @ x if need_w else None
    return dx, dw, dbias, (grad if need_res else None), None


def _gate_up_input_grads(d_gate, d_up, dgu, dbias32, x, w_gate, w_up, b_gate, b_up, need):
    """Grads of (x, w_gate, w_up, b_gate, b_up) from d_gate, d_up (dgu = [d_gate |
    d_up] when they are one [M, 2*hidden] tensor, else None) and the float32 bias
    column sums [2*hidden]; `need` says which of the five are wanted."""
    need_x, need_wg, need_wu, need_bg, need_bu = need
    hidden = d_gate.shape[1]
    dx = dwg = dwu = dbg = dbu = None
    if w_up is None:  # merged [2*hidden, K] weight
        if dgu is not None:  # one GEMM each way
            dx = dgu @ w_gate if need_x else None
            dwg = dgu.t() @ x if need_wg else None
        else:
            if need_x:
                dx = (d_gate @ w_gate[:hidden]).addmm_(d_up, w_gate[hidden:])
            if need_wg:
                dwg = torch.cat([d_gate.t() @ x, d_up.t() @ x])
    else:
        if need_x:
            dx = (d_gate @ w_gate).addmm_(d_up, w_up)  # in place: addmm would first copy its input
        if need_wg:
            dwg = d_gate.t() @ x
        if need_wu:
            dwu = d_up.t() @ x
    if need_bg or need_bu:
        if b_gate is not None and b_gate.shape[0] == 2 * hidden:  # merged bias
            dbg = dbias32.to(b_gate.dtype)
        else:
            dbg = dbias32[:hidden].to(b_gate.dtype) if need_bg else None
            dbu = dbias32[hidden:].to(b_up.dtype) if need_bu else None
    return dx, dwg, dwu, dbg, dbu


def _split_dgu(dgu: Tensor):
    hidden = dgu.shape[1] // 2
    return dgu[:, :hidden], dgu[:, hidden:]


def _geglu_linear_setup(ctx, inputs, output):
    x, w_gate, w_up, b_gate, b_up, approximate = inputs
    ctx.approximate = approximate
    ctx.save_for_backward(x, w_gate, w_up, b_gate, b_up)


def _geglu_linear_backward(ctx, grad_h):
    """Recomputing backward: one fused GEMM from x gives d_gate_up."""
    x, w_gate, w_up, b_gate, b_up = ctx.saved_tensors
    need = ctx.needs_input_grad[:5]
    dgu, _, dbias32 = _geglu_linear_grad(grad_h, x, w_gate, w_up, b_gate, b_up, ctx.approximate, False, need[3] or need[4])
    return (*_gate_up_input_grads(*_split_dgu(dgu), dgu, dbias32, x, w_gate, w_up, b_gate, b_up, need), None)


def _geglu_linear_train_setup(ctx, inputs, output):
    x, w_gate, w_up, b_gate, b_up, approximate = inputs
    ctx.approximate = approximate
    ctx.mark_non_differentiable(output[1])
    ctx.save_for_backward(x, w_gate, w_up, b_gate, b_up, output[1])


def _geglu_linear_train_backward(ctx, grad_h, _grad_pre):
    """Saved gate/up: the elementwise GeGLU backward gives d_gate, d_up."""
    x, w_gate, w_up, b_gate, b_up, pre = ctx.saved_tensors
    need = ctx.needs_input_grad[:5]
    d_gate, d_up = _geglu_backward_elementwise(grad_h.contiguous(), *_split_dgu(pre), ctx.approximate)
    dbias32 = None
    if need[3] or need[4]:
        dbias32 = torch.cat([d_gate.sum(0, dtype=torch.float32), d_up.sum(0, dtype=torch.float32)])
    return (*_gate_up_input_grads(d_gate, d_up, None, dbias32, x, w_gate, w_up, b_gate, b_up, need), None)


def _geglu_mlp_setup(ctx, inputs, output):
    x, w_gate, w_up, w_down, b_gate, b_up, b_down, residual, approximate = inputs
    ctx.approximate = approximate
    ctx.save_for_backward(x, w_gate, w_up, w_down, b_gate, b_up)


def _geglu_mlp_backward(ctx, grad):
    """Recomputing backward: grad_h = grad @ w_down, then one fused GEMM from x gives
    d_gate_up and h."""
    x, w_gate, w_up, w_down, b_gate, b_up = ctx.saved_tensors
    need_x, need_wg, need_wu, need_wd, need_bg, need_bu, need_bd, need_res, _ = ctx.needs_input_grad
    need_gate_up = (need_x, need_wg, need_wu, need_bg, need_bu)
    dx = dwg = dwu = dwd = dbg = dbu = None
    if any(need_gate_up):
        dgu, h, dbias32 = _geglu_linear_grad(
            grad @ w_down, x, w_gate, w_up, b_gate, b_up, ctx.approximate, need_wd, need_bg or need_bu
        )
        dx, dwg, dwu, dbg, dbu = _gate_up_input_grads(
            *_split_dgu(dgu), dgu, dbias32, x, w_gate, w_up, b_gate, b_up, need_gate_up
        )
    elif need_wd:  # only the down projection trains: the forward GEMM gives h
        h = _geglu_linear(x, w_gate, w_up, b_gate, b_up, ctx.approximate)
    if need_wd:
        dwd = grad.t() @ h
    dbd = grad.sum(0) if need_bd else None
    return dx, dwg, dwu, dwd, dbg, dbu, dbd, (grad if need_res else None), None


def _geglu_mlp_train_setup(ctx, inputs, output):
    x, w_gate, w_up, w_down, b_gate, b_up, b_down, residual, approximate = inputs
    ctx.approximate = approximate
    ctx.mark_non_differentiable(output[1], output[2])
    ctx.save_for_backward(x, w_gate, w_up, w_down, b_gate, b_up, output[1], output[2])


def _geglu_mlp_train_backward(ctx, grad, _grad_pre, _grad_h):
    """Saved gate/up and h: grad_h = grad @ w_down on cuBLAS, then the elementwise GeGLU
    backward gives d_gate, d_up; with FUSED_SAVED_BACKWARD one fused GEMM gives
    d_gate_up. w_down's grad is grad.T @ h."""
    x, w_gate, w_up, w_down, b_gate, b_up, pre, h = ctx.saved_tensors
    need_x, need_wg, need_wu, need_wd, need_bg, need_bu, need_bd, need_res, _ = ctx.needs_input_grad
    need_gate_up = (need_x, need_wg, need_wu, need_bg, need_bu)
    dx = dwg = dwu = dwd = dbg = dbu = None
    if any(need_gate_up):
        bias_grad = need_bg or need_bu
        if _backend_for("geglu_saved_grad", grad, w_down.t()) == "cublas":
            d_gate, d_up, dbias32 = _cublas_geglu_saved_grad(grad, pre, w_down, ctx.approximate, bias_grad)
            dgu = None
        else:  # the fused kernel (FUSED_SAVED_BACKWARD), or the eager composite for empty inputs
            dgu, _, dbias32 = _geglu_mlp_grad(grad, pre, w_down, ctx.approximate, False, bias_grad)
            d_gate, d_up = _split_dgu(dgu)
        dx, dwg, dwu, dbg, dbu = _gate_up_input_grads(
            d_gate, d_up, dgu, dbias32, x, w_gate, w_up, b_gate, b_up, need_gate_up
        )
    if need_wd:
        dwd = grad.t() @ h
    dbd = grad.sum(0) if need_bd else None
    return dx, dwg, dwu, dwd, dbg, dbu, dbd, (grad if need_res else None), None


_linear_epilogue = _Op(
    "linear_epilogue", _linear_epilogue_impl, _linear_epilogue_fake, _linear_epilogue_backward, _linear_epilogue_setup
)
_linear_gelu_grad = _Op("linear_gelu_grad", _linear_gelu_grad_impl, _linear_gelu_grad_fake)
_geglu_linear = _Op("geglu_linear", _geglu_linear_impl, _geglu_linear_fake, _geglu_linear_backward, _geglu_linear_setup)
_geglu_linear_train = _Op(
    "geglu_linear_train",
    _geglu_linear_train_impl,
    _geglu_linear_train_fake,
    _geglu_linear_train_backward,
    _geglu_linear_train_setup,
)
_geglu_linear_grad = _Op("geglu_linear_grad", _geglu_linear_grad_impl, _geglu_linear_grad_fake)
_geglu_mlp = _Op("geglu_mlp", _geglu_mlp_impl, _geglu_mlp_fake, _geglu_mlp_backward, _geglu_mlp_setup)
_geglu_mlp_train = _Op(
    "geglu_mlp_train", _geglu_mlp_train_impl, _geglu_mlp_train_fake, _geglu_mlp_train_backward, _geglu_mlp_train_setup
)
_geglu_mlp_grad = _Op("geglu_mlp_grad", _geglu_mlp_grad_impl, _geglu_mlp_grad_fake)


# --------------------------------------------------------------------------- native training MLP
# Arch variants (compiled CUDA or CPU module) also carry geglu_mlp_cublas
# (torch-ext/geglu_mlp.cpp): the same computation as the cuBLAS training route above
# (gate/up GEMMs + elementwise GeGLU forward saving [gate | up] and h; grad @ w_down +
# elementwise GeGLU backward), driven from C++ with a C++ autograd node. A training
# step of the blog-shape MLP is bound by host time, not by the GPU (H100:
# benchmarks/results/profile_mlp_train_h100.log), and this removes the Python between
# its kernels. Python keeps serving torch.compile (which traces the custom ops above),
# fake/meta tensors, the switches below, and the noarch variant.

_NATIVE_MLP_DEVICE_TYPES = NATIVE_DEVICE_TYPES if hasattr(ops, "geglu_mlp_cublas") else frozenset()


def _native_mlp_fake(x, w_gate, w_up, w_down, b_gate, b_up, b_down, residual, approximate):
    return x.new_empty((x.shape[0], w_down.shape[0]))


if _NATIVE_MLP_DEVICE_TYPES:
    try:
        torch.library.register_fake(add_op_namespace_prefix("geglu_mlp_cublas"), _native_mlp_fake)
    except RuntimeError:  # a second import of the same build: registered by the first
        pass


def _native_training_mlp(x: Tensor, w_gate: Tensor, w_down: Tensor, *tensors) -> bool:
    """Whether a training call of geglu_mlp runs as the compiled op: its device has the
    native module (never "meta"; the arguments were checked to share x's device), the
    switches ask for the cuBLAS route with the elementwise backward, the problem is not
    empty, and nothing needs the Python op (compile tracing, tensor subclasses)."""
    return (
        x.device.type in _NATIVE_MLP_DEVICE_TYPES
        and TRAIN_GATE_UP_ON_CUBLAS
        and not FUSED_SAVED_BACKWARD
        and _nonempty(x, w_gate, w_down)
        and not torch.compiler.is_compiling()
        and all_plain(x, w_gate, w_down, *tensors)
    )


# --------------------------------------------------------------------------- validation


def _check_x(x) -> None:
    check_tensor("x", x)
    if x.device.type not in _DEVICE_TYPES:
        raise ValueError(
            f"x is on {x.device}: the fused GEMMs run on CUDA (Triton) or CPU (eager fallback), "
            f"not on {x.device.type}"
        )


def _check_weight(name: str, w, x: Tensor, in_features: int) -> None:
    check_tensor(name, w)
    check_same_dtype(name, w, "x", x)
    check_same_device(name, w, "x", x)
    if w.dim() != 2 or w.shape[1] != in_features:
        raise ValueError(
            f"{name} must be a 2-d [out_features, {in_features}] weight (nn.Linear layout, "
            f"in_features = the last dim of its input), got shape {tuple(w.shape)}"
        )


def _check_vector(name: str, t, x: Tensor, length: int) -> None:
    if t is None:
        return
    check_tensor(name, t)
    check_same_dtype(name, t, "x", x)
    check_same_device(name, t, "x", x)
    check_shape(name, t, (length,))


def _check_residual(residual, x: Tensor, shape) -> None:
    if residual is None:
        return
    check_tensor("residual", residual)
    check_same_dtype("residual", residual, "x", x)
    check_same_device("residual", residual, "x", x)
    check_shape("residual", residual, shape)


def _check_gate_up(x, w_gate, w_up, b_gate, b_up) -> int:
    """Validates the gate/up operands and returns hidden."""
    k = x.shape[-1]
    _check_weight("w_gate", w_gate, x, k)
    if w_up is None:
        if w_gate.shape[0] % 2:
            raise ValueError(
                "w_gate must have an even number of rows when w_up is None (a merged "
                f"[2*hidden, in] gate/up weight, gate rows first), got shape {tuple(w_gate.shape)}"
            )
        hidden = w_gate.shape[0] // 2
        if b_gate is not None and b_up is None and b_gate.shape == (2 * hidden,):
            _check_vector("b_gate", b_gate, x, 2 * hidden)  # merged bias
            return hidden
    else:
        hidden = w_gate.shape[0]
        _check_weight("w_up", w_up, x, k)
        check_shape("w_up", w_up, tuple(w_gate.shape))
    _check_vector("b_gate", b_gate, x, hidden)
    _check_vector("b_up", b_up, x, hidden)
    return hidden


def _rows(x: Tensor) -> Tensor:
    """x as [tokens, features]; a 2-d x as is (a reshape costs ~1 us of host time)."""
    return x if x.dim() == 2 else x.reshape(-1, x.shape[-1])


def _saving_for_backward(*tensors) -> bool:
    """Whether this call takes the training path that saves the pre-activations."""
    if RECOMPUTE_IN_BACKWARD or not torch.is_grad_enabled():
        return False
    return any(t is not None and t.requires_grad for t in tensors)


# --------------------------------------------------------------------------- public API


def linear_bias(x: Tensor, weight: Tensor, bias: Optional[Tensor]) -> Tensor:
    """x @ weight.T + bias (bias may be None) with the bias added in the GEMM epilogue.

    x: [..., in] float16/bfloat16/float32; weight: [out, in]; bias: [out]. Returns [..., out]."""
    _check_x(x)
    _check_weight("weight", weight, x, x.shape[-1])
    _check_vector("bias", bias, x, weight.shape[0])
    args = (_rows(x), weight, bias, None, "none")
    y = _linear_epilogue(*args)
    return y.reshape(*x.shape[:-1], weight.shape[0])


def linear_bias_gelu(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None, approximate: str = "tanh") -> Tensor:
    """gelu(x @ weight.T + bias) in one kernel (bias and GELU in the GEMM epilogue).

    approximate: "tanh" (gelu_pytorch_tanh / gelu_new) or "none" (exact erf GELU).
    x: [..., in]; weight: [out, in]; bias: [out] or None. Returns [..., out]."""
    _check_x(x)
    _check_weight("weight", weight, x, x.shape[-1])
    _check_vector("bias", bias, x, weight.shape[0])
    check_approximate("approximate", approximate)
    args = (_rows(x), weight, bias, None, _GELU_FOR[approximate])
    y = _linear_epilogue(*args)
    return y.reshape(*x.shape[:-1], weight.shape[0])


def geglu_linear(
    x: Tensor,
    w_gate: Tensor,
    w_up: Optional[Tensor] = None,
    b_gate: Optional[Tensor] = None,
    b_up: Optional[Tensor] = None,
    approximate: str = "tanh",
) -> Tensor:
    """gelu(x @ w_gate.T + b_gate) * (x @ w_up.T + b_up) in one kernel: each x tile
    feeds a gate and an up accumulator; only [..., hidden] is written.

    w_gate, w_up: [hidden, in]. w_up=None: w_gate is a merged [2*hidden, in] gate/up
    weight (gate rows first), read in place; its bias is then either merged
    (b_gate [2*hidden], b_up None) or split (b_gate, b_up of [hidden]).
    Returns [..., hidden]."""
    _check_x(x)
    hidden = _check_gate_up(x, w_gate, w_up, b_gate, b_up)
    check_approximate("approximate", approximate)
    args = (_rows(x), w_gate, w_up, b_gate, b_up, approximate)
    if _saving_for_backward(x, w_gate, w_up, b_gate, b_up):
        h, _ = _geglu_linear_train(*args)
    else:
        h = _geglu_linear(*args)
    return h.reshape(*x.shape[:-1], hidden)


def geglu_mlp(
    x: Tensor,
    w_gate: Tensor,
    w_up: Optional[Tensor],
    w_down: Tensor,
    biases: Optional[Tuple[Optional[Tensor], Optional[Tensor], Optional[Tensor]]] = None,
    residual: Optional[Tensor] = None,
    approximate: str = "tanh",
) -> Tensor:
    """down(gelu(gate(x)) * up(x)) [+ residual] as two fused GEMMs:
    geglu_linear, then x_hidden @ w_down.T with b_down and the residual added in the
    down GEMM's epilogue.

    w_gate, w_up: [hidden, in] (w_up=None: merged [2*hidden, in], see geglu_linear);
    w_down: [out, hidden]. biases: None or a 3-tuple (b_gate, b_up, b_down), each a
    tensor or None (b_gate may be a merged [2*hidden] bias with a merged weight).
    residual: None or a tensor of the output's shape [..., out], e.g. the block
    input for `x + mlp(x)`. Returns [..., out]."""
    _check_x(x)
    if biases is None:
        biases = (None, None, None)
    if not isinstance(biases, (tuple, list)) or len(biases) != 3:
        raise TypeError(f"biases must be None or a tuple (b_gate, b_up, b_down), got {biases!r}")
    b_gate, b_up, b_down = biases
    hidden = _check_gate_up(x, w_gate, w_up, b_gate, b_up)
    _check_weight("w_down", w_down, x, hidden)
    _check_vector("b_down", b_down, x, w_down.shape[0])
    out_shape = (*x.shape[:-1], w_down.shape[0])
    _check_residual(residual, x, out_shape)
    check_approximate("approximate", approximate)
    res = None if residual is None else _rows(residual)
    args = (_rows(x), w_gate, w_up, w_down, b_gate, b_up, b_down, res, approximate)
    if _saving_for_backward(x, w_gate, w_up, w_down, b_gate, b_up):
        if _native_training_mlp(args[0], w_gate, w_down, w_up, b_gate, b_up, b_down, res):
            y = ops.geglu_mlp_cublas(*args)
        else:
            y = _geglu_mlp_train(*args)[0]
    else:
        y = _geglu_mlp(*args)
    return y if x.dim() == 2 else y.reshape(out_shape)
