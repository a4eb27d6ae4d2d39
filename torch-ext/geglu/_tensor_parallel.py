"""Tensor parallelism: when a GeGLU block's gate/up projections can run the fused GEMM on
their local shards, and what those shards are.

Under a column-wise plan each rank holds rows of the gate and up weights (DTensor,
`Shard(0)`), and TP's wrapper around each projection turns the replicated input into
this rank's columns of the output, `x @ w_local.T + b_local`, as a plain tensor. The
GeGLU is elementwise over those columns, so `gelu(x Wg_local^T) * (x Wu_local^T)` is
this rank's shard of h: computed with the fused op, it is exactly what
`act(gate(x)) * up(x)` gives under the plan, without gathering any weight. The caller
hands it to the down projection as the original forward does, whose own TP wrapper
(row-wise) then does the plan's reduction.

Recognized, and nothing else (anything else returns None: the module's own forward):

- torch's `ColwiseParallel` applied by `parallelize_module` (`distribute_module`'s
  pre/post hooks wrapping `ColwiseParallel._prepare_input_fn` / `_prepare_output_fn`)
  with `input_layouts=Replicate()`, the output sharded on the last dim, and
  `use_local_output=True` (the defaults);
- Transformers' `ColwiseParallel` ("colwise": its `tp_forward` set on the instance
  around `nn.Linear.forward`) with the same layouts and a local output.

Both projections: exact `nn.Linear`, the one TP wrapper and no other hook or forward,
weights (and biases) DTensors sharded `Shard(0)` on the same 1-D mesh as the wrapper's,
the same global and local shapes (so the same rows of the intermediate dimension on
this rank), local tensors of x's dtype on x's device. x itself: a plain tensor (a
DTensor input, as sequence parallelism passes, is laid out by TP's hooks: not here).
Not under torch.compile (it traces TP's hooks; these checks read closures).

With gradients, x is passed as DTensor does it (`from_local(Replicate)`,
`to_local(grad_placements=[Partial()])`), so its gradient is all-reduced across the
ranks in the backward, and the weights through `to_local`, whose gradients land on the
DTensor parameters as `Shard(0)`: what the plan's own forward does.

Only torch is imported; the TP classes are looked up in modules already loaded (a
DTensor weight means torch.distributed.tensor is; a Transformers TP forward means its
module is).
"""

import functools
import sys
import types

import torch
import torch.nn as nn

from ._fastpath import PLAIN_TYPES

_TORCH_API = "torch.distributed.tensor._api"
_TORCH_STYLE = "torch.distributed.tensor.parallel.style"
_TRANSFORMERS_TP = "transformers.distributed.tensor_parallel"
_HOOK_DICTS = (
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_forward_pre_hooks_with_kwargs",
    "_backward_hooks",
    "_backward_pre_hooks",
)

_code_cache = {}


def _nested_codes(owner: str, fn) -> frozenset:
    """The code objects of the functions defined inside `fn` (distribute_module's hook
    lambdas, install_forward's tp_forward), read from its constants once."""
    codes = _code_cache.get(owner)
    if codes is None:
        codes = frozenset(c for c in fn.__code__.co_consts if isinstance(c, types.CodeType))
        _code_cache[owner] = codes
    return codes


def _closure(fn, codes) -> "dict | None":
    """{free variable: value} of `fn` if it is a function made from one of `codes`."""
    code = getattr(fn, "__code__", None)
    if type(fn) is not types.FunctionType or code not in codes or fn.__closure__ is None:
        return None
    return {name: cell.cell_contents for name, cell in zip(code.co_freevars, fn.__closure__)}


def _last_dim_shard(placement, x: torch.Tensor, shard_cls) -> bool:
    return type(placement) is shard_cls and placement.dim in (-1, x.dim() - 1)


def _torch_colwise_mesh(m: nn.Module, x: torch.Tensor):
    """The mesh of torch's ColwiseParallel on m (standard layouts), or None."""
    distribute_module = getattr(sys.modules.get(_TORCH_API), "distribute_module", None)
    colwise = getattr(sys.modules.get(_TORCH_STYLE), "ColwiseParallel", None)
    if distribute_module is None or colwise is None or "forward" in m.__dict__:
        return None
    if len(m._forward_pre_hooks) != 1 or len(m._forward_hooks) != 1:
        return None
    codes = _nested_codes(_TORCH_API, distribute_module)
    (pre,) = m._forward_pre_hooks.values()
    (post,) = m._forward_hooks.values()
    pre, post = _closure(pre, codes), _closure(post, codes)
    if pre is None or post is None or "input_fn" not in pre or "output_fn" not in post:
        return None
    input_fn, output_fn, mesh = pre["input_fn"], post["output_fn"], pre.get("device_mesh")
    placements = sys.modules["torch.distributed.tensor.placement_types"]
    if (
        mesh is None
        or post.get("device_mesh") is not mesh
        or type(input_fn) is not functools.partial
        or type(output_fn) is not functools.partial
        or input_fn.func is not getattr(colwise, "_prepare_input_fn", None)
        or output_fn.func is not getattr(colwise, "_prepare_output_fn", None)
        or input_fn.keywords
        or output_fn.keywords
        or len(input_fn.args) != 2
        or len(output_fn.args) != 2
    ):
        return None
    (input_layouts, desired_layouts), (output_layouts, use_local_output) = input_fn.args, output_fn.args
    for layouts in (input_layouts, desired_layouts):
        if type(layouts) is not tuple or len(layouts) != 1 or type(layouts[0]) is not placements.Replicate:
            return None
    if use_local_output is not True:
        return None
    if type(output_layouts) is not tuple or len(output_layouts) != 1:
        return None
    if not _last_dim_shard(output_layouts[0], x, placements.Shard):
        return None
    return mesh


def _transformers_colwise_mesh(m: nn.Module, x: torch.Tensor):
    """The mesh of Transformers' ColwiseParallel ("colwise") on m, or None."""
    tp = sys.modules.get(_TRANSFORMERS_TP)
    forward = m.__dict__.get("forward")
    if tp is None or forward is None or m._forward_pre_hooks or m._forward_hooks:
        return None
    install_forward = getattr(getattr(tp, "TensorParallelLayer", None), "install_forward", None)
    colwise = getattr(tp, "ColwiseParallel", None)
    if install_forward is None or colwise is None:
        return None
    cells = _closure(forward, _nested_codes(_TRANSFORMERS_TP, install_forward))
    if cells is None or cells.get("module") is not m or cells.get("mesh") is None:
        return None
    style, original = cells.get("self"), cells.get("original_forward")
    if (
        type(style) is not colwise
        or type(original) is not types.MethodType
        or original.__func__ is not nn.Linear.forward
        or original.__self__ is not m
        or getattr(m, "_hf_quantized_needs_local_tp", False)
        or set(vars(style)) != {"input_layouts", "output_layouts", "use_local_output"}
    ):
        return None
    placements = sys.modules["torch.distributed.tensor.placement_types"]
    if type(style.input_layouts) is not placements.Replicate or style.use_local_output is not True:
        return None
    if not _last_dim_shard(style.output_layouts, x, placements.Shard):
        return None
    return cells["mesh"]


def _row_shards(m: nn.Module, x: torch.Tensor, mesh, dtensor, shard_cls):
    """(weight, bias) DTensors of m sharded Shard(0) on `mesh` (1-D), whose local
    tensors are x's dtype on x's device and read x's width; else None."""
    w, b = m._parameters.get("weight"), m._parameters.get("bias")
    for t in (w, b) if b is not None else (w,):
        if type(t) is not dtensor or len(t.placements) != 1:
            return None
        p = t.placements[0]
        if type(p) is not shard_cls or p.dim != 0:
            return None
        if t.device_mesh is not mesh and t.device_mesh != mesh:
            return None
        local = t._local_tensor
        if local.dtype != x.dtype or local.device != x.device:
            return None
    if mesh.ndim != 1 or w.dim() != 2 or w.shape[1] != x.shape[-1] or w._local_tensor.shape[1] != x.shape[-1]:
        return None
    if b is not None and (b.shape[0] != w.shape[0] or b._local_tensor.shape[0] != w._local_tensor.shape[0]):
        return None
    return w, b


def local_gate_up(x: torch.Tensor, gate: nn.Module, up: nn.Module):
    """(x, w_gate, w_up, b_gate, b_up) as local tensors when `gate` and `up` are a
    column-sharded pair that geglu_linear computes on its local shards (module
    docstring); None otherwise. The caller has checked x's dtype and autocast."""
    dtensor_mod = sys.modules.get("torch.distributed.tensor")
    if dtensor_mod is None or type(x) not in PLAIN_TYPES or torch.compiler.is_compiling():
        return None
    dtensor = dtensor_mod.DTensor
    if type(gate) is not nn.Linear or type(up) is not nn.Linear:
        return None
    if type(gate._parameters.get("weight")) is not dtensor:
        return None
    if any(getattr(m, name) for m in (gate, up) for name in _HOOK_DICTS):
        return None
    meshes = []
    for m in (gate, up):
        mesh = _torch_colwise_mesh(m, x)
        if mesh is None:
            mesh = _transformers_colwise_mesh(m, x)
        if mesh is None:
            return None
        meshes.append(mesh)
    if meshes[0] is not meshes[1] and meshes[0] != meshes[1]:
        return None
    shard = sys.modules["torch.distributed.tensor.placement_types"].Shard
    g, u = _row_shards(gate, x, meshes[0], dtensor, shard), _row_shards(up, x, meshes[0], dtensor, shard)
    if g is None or u is None:
        return None
    (wg, bg), (wu, bu) = g, u
    # The same rows of the intermediate dimension on this rank: the same global and
    # local shapes under the same mesh and placement.
    if wg.shape != wu.shape or wg._local_tensor.shape != wu._local_tensor.shape:
        return None
    if torch.is_grad_enabled():
        if x.requires_grad:
            placements = sys.modules["torch.distributed.tensor.placement_types"]
            x_dt = dtensor.from_local(x, meshes[0], (placements.Replicate(),), run_check=False)
            x = x_dt.to_local(grad_placements=(placements.Partial(),))
        local = [None if t is None else t.to_local() for t in (wg, wu, bg, bu)]
    else:
        local = [None if t is None else t._local_tensor for t in (wg, wu, bg, bu)]
    return (x, *local)
