"""The rungs of the MLP ladder: one GeGLU MLP computed the ways a reader of "Profiling in
PyTorch (Part 2): From nn.Linear to a Fused MLP" meets it, each a forward callable over
the same weights.

    eager           SimpleGeGLUMLP as written: 3 cuBLAS GEMMs, the GELU, the mul (5 kernels)
    torch.compile   Inductor fuses GELU and mul into one Triton kernel (4)
    liger           LigerGEGLUMLP: the same fusion, hand-written in Triton (4)
    geglu_mlp       this package through kernels.get_kernel, the functional call
    kernelized      SimpleGeGLUMLP after kernels.kernelize swapped in the package's
                    GeGLUMLP layer (the forward a Transformers model gets)

Both geglu rungs are one native op (`_geglu_mlp`). On an H100 / H200 at the post's
8192 tokens its routes (geglu_kernels/cuda/fused_gemm_router.cpp) launch the gate/up GEMM
with the GeGLU in its epilogue, then cuBLAS's down GEMM: 2 kernels (at 1-32 tokens other
kernels serve). With `without_sm90`, two rungs show what
a GPU without the Hopper engine (A100-class) runs, on the same card; see
`sm90_off_rungs` for why they are built the way they are.
"""

import copy
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from kernels import LocalLayerRepository, Mode, kernelize, use_kernel_forward_from_hub, use_kernel_mapping

REPO = Path(__file__).resolve().parent.parent


@use_kernel_forward_from_hub("GeGLUMLP")
class SimpleGeGLUMLP(nn.Module):
    """The post's MLP, down(gelu_tanh(gate(x)) * up(x)), three nn.Linear without bias.

    Its attributes carry the names the package's GeGLUMLP layer reads (gate_proj,
    up_proj, down_proj, act_fn: torch-ext/geglu/layers.py), and the decorator gives it
    the Hub layer name "GeGLUMLP", so kernels.kernelize can swap its forward."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)
        self.act_fn = nn.GELU(approximate="tanh")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


@dataclass
class Rung:
    """One way to compute the MLP: `forward(x)`, or `skipped` with the reason."""

    name: str
    what: str  # one line: what runs
    forward: Optional[Callable[[torch.Tensor], torch.Tensor]] = None
    skipped: Optional[str] = None  # a rung this machine cannot run (no Liger, no CUDA)
    failed: Optional[str] = None  # a rung that should run and could not be built
    sm90_engine: str = "n/a"  # "on", "off" or "n/a": whether the Hopper engine may serve it
    op_namespaces: set = field(default_factory=set)  # the package's op namespaces it calls


def op_namespace(kernel_package) -> str:
    """The torch.ops namespace of a loaded build of the package (its `_ops` module
    names it; one per build, e.g. `_geglu_cuda_<commit>`)."""
    return kernel_package._ops.add_op_namespace_prefix("x").split("::")[0]


def eager_rung(model: SimpleGeGLUMLP) -> Rung:
    return Rung("eager", "nn.Module: 3 nn.Linear + GELU(tanh) + mul", forward=model)


def compile_rung(model: SimpleGeGLUMLP, device: str) -> Rung:
    # dynamic=False: one shape, one compiled graph, no recompile in the trace. On CPU,
    # Inductor's C++ kernels run inside the compiled graph with no profiler event of
    # their own; its kernel profile wraps each in one, so the fused GELU * mul shows on
    # CPU as the Triton kernel shows on a GPU (an option of this compile only).
    options = {"cpp.enable_kernel_profile": True} if device == "cpu" else None
    compiled = torch.compile(copy.deepcopy(model), dynamic=False, options=options)
    return Rung("torch.compile", "Inductor: the 3 GEMMs + one fused GELU*mul kernel", forward=compiled)


def liger_rung(model: SimpleGeGLUMLP, device: str) -> Rung:
    what = "LigerGEGLUMLP: cuBLAS GEMMs + Liger's GELU*mul Triton kernel"
    try:
        from liger_kernel.transformers.geglu import LigerGEGLUMLP
    except ImportError as e:
        return Rung("liger", what, skipped=f"liger-kernel is not installed ({e})")
    except Exception as e:  # installed, but its import fails here (a triton it does not support)
        return Rung("liger", what, skipped=f"liger-kernel does not import: {e!r}")
    if device != "cuda":
        return Rung("liger", what, skipped="Liger's kernels are Triton GPU kernels: CUDA only")
    dim, hidden = model.gate_proj.in_features, model.gate_proj.out_features
    config = SimpleNamespace(hidden_size=dim, intermediate_size=hidden, hidden_act="gelu_pytorch_tanh")
    liger = LigerGEGLUMLP(config)
    # The same weights (the same parameter names); act_fn has none.
    liger.load_state_dict(model.state_dict())
    liger = liger.to(device=model.gate_proj.weight.device, dtype=model.gate_proj.weight.dtype).eval()
    return Rung("liger", what, forward=liger)


def geglu_mlp_rung(model: SimpleGeGLUMLP, geglu, sm90_engine: str) -> Rung:
    w_gate, w_up, w_down = model.gate_proj.weight, model.up_proj.weight, model.down_proj.weight

    def forward(x):
        return geglu.geglu_mlp(x, w_gate, w_up, w_down)

    return Rung(
        "geglu_mlp",
        "kernels.get_kernel: geglu.geglu_mlp(x, w_gate, w_up, w_down)",
        forward=forward,
        sm90_engine=sm90_engine,
        op_namespaces={op_namespace(geglu)},
    )


def kernelized_rung(model: SimpleGeGLUMLP, device: str, sm90_engine: str) -> Rung:
    """SimpleGeGLUMLP kernelized with the package's GeGLUMLP layer from this checkout's
    build/ (example.py's recipe with its `local_layer`: a LocalLayerRepository)."""
    mapping = {"GeGLUMLP": {device: LocalLayerRepository(repo_path=REPO, layer_name="GeGLUMLP")}}
    with use_kernel_mapping(mapping):
        swapped = kernelize(copy.deepcopy(model), mode=Mode.INFERENCE, device=device)
    layer_module = sys.modules[swapped.forward.__func__.__module__]
    if not layer_module.__name__.endswith(".layers"):
        raise RuntimeError(f"kernelize kept {swapped.forward}; expected the package's GeGLUMLP layer")
    package = sys.modules[layer_module.__name__.rsplit(".", 1)[0]]
    return Rung(
        "kernelized",
        "kernels.kernelize(SimpleGeGLUMLP) with the package's GeGLUMLP layer",
        forward=swapped,
        sm90_engine=sm90_engine,
        op_namespaces={op_namespace(package)},
    )


# --------------------------------------------------------------------------- without sm_90


def sm90_off_rungs(model: SimpleGeGLUMLP, geglu, device: str) -> list:
    """What a GPU without the Hopper engine (A100-class) runs, shown on any GPU.

    No switch turns the engine off for the native ops: `_geglu_mlp` (and `_geglu_linear`)
    choose in C++, geglu_kernels/cuda/fused_gemm_router.cpp, where `sm90_serves`,
    `fused_small_batch_mlp`, `fused_down` and `fused_linear_gelu` ask `is_sm90()`: the device's
    capability from cudaDeviceGetAttribute, cached in a static array. No environment
    variable and no Python state reaches it. So these rungs run the same kernels by
    other calls:

    - geglu_mlp fallback: what `_geglu_mlp` launches where `is_sm90()` is false
      (geglu_kernels/ops/geglu_mlp.cpp: `gate_up_geglu` falls back to `gate_up` and
      `geglu_halves`, then `down`; the same on any non-sm_90 GPU): two cuBLAS GEMMs
      writing the column halves of one [tokens, 2*hidden] buffer, the package's geglu
      kernel on the halves in place, the down GEMM. The GPU lane is the A100's; the host
      ops are these Python calls', not the one native op's.
    - Triton gate/up + down: what the Triton-only `torch-cuda` variant runs for
      geglu_mlp on any GPU (linear.py's `_fused_gate_up`): the package's Triton gate/up
      GEMM with the GeGLU in its epilogue, then cuBLAS's down GEMM."""
    w_gate, w_up, w_down = model.gate_proj.weight, model.up_proj.weight, model.down_proj.weight
    hidden = w_gate.shape[0]
    namespaces = {op_namespace(geglu)}

    def native_fallback(x):
        rows = x.reshape(-1, x.shape[-1])
        pre = rows.new_empty((rows.shape[0], 2 * hidden))
        torch.mm(rows, w_gate.t(), out=pre[:, :hidden])
        torch.mm(rows, w_up.t(), out=pre[:, hidden:])
        h = geglu.geglu(pre[:, :hidden], pre[:, hidden:], approximate="tanh")
        return F.linear(h, w_down).reshape(*x.shape[:-1], w_down.shape[0])

    fallback = Rung(
        "geglu_mlp fallback, no sm90",
        "the kernels _geglu_mlp launches without sm_90, rebuilt: 2 mm into [gate|up], geglu, down",
        forward=native_fallback,
        sm90_engine="off",
        op_namespaces=namespaces,
    )
    what = "the torch-cuda variant's route: the package's Triton gate/up GEMM + F.linear"
    triton_gemm = getattr(getattr(geglu, "triton_kernels", None), "gemm", None)
    if device != "cuda" or triton_gemm is None:
        reason = "the Triton GEMM needs CUDA" if device != "cuda" else "triton is not installed"
        return [fallback, Rung("triton gate/up, no sm90", what, skipped=reason, sm90_engine="off")]

    def triton_gate_up_then_down(x):
        rows = x.reshape(-1, x.shape[-1])
        h = triton_gemm.geglu_forward(rows, w_gate, w_up, None, None, "tanh")
        return F.linear(h, w_down).reshape(*x.shape[:-1], w_down.shape[0])

    return [
        fallback,
        Rung("triton gate/up, no sm90", what, forward=triton_gate_up_then_down, sm90_engine="off",
             op_namespaces=namespaces),  # fmt: skip
    ]


def sm90_engine_serves(geglu, device: str, dtype: torch.dtype) -> bool:
    """Whether the native op runs the Hopper engine here: a compiled CUDA variant (it has
    `_geglu_mlp`) on a capability 9.0 GPU, in bf16 / fp16 (fused_gemm_router.cpp's rules; the
    post's shapes meet its alignment rules)."""
    return (
        device == "cuda"
        and hasattr(geglu._ops.ops, "_geglu_mlp")
        and torch.cuda.get_device_capability() == (9, 0)
        and dtype in (torch.bfloat16, torch.float16)
    )


def _built(name: str, build) -> Rung:
    """build(), or a failed rung saying why: one broken rung (kernelize keeping the
    original forward, say) must not cost the others' profiles."""
    try:
        return build()
    except Exception as e:
        return Rung(name, "", failed=repr(e))


def ladder(model: SimpleGeGLUMLP, geglu, device: str, without_sm90: bool = False, only=None) -> list:
    """The rungs in the post's order, ours last; `only`: names to keep (others are dropped)."""
    engine = "on" if sm90_engine_serves(geglu, device, model.gate_proj.weight.dtype) else "n/a"
    builders = {
        "eager": lambda: eager_rung(model),
        "torch.compile": lambda: compile_rung(model, device),
        "liger": lambda: liger_rung(model, device),
        "geglu_mlp": lambda: geglu_mlp_rung(model, geglu, engine),
        "kernelized": lambda: kernelized_rung(model, device, engine),
    }
    rungs = [_built(name, build) for name, build in builders.items() if only is None or name in only]
    if without_sm90:
        rungs += sm90_off_rungs(model, geglu, device)
    return rungs
