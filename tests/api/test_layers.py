"""geglu.layers: Hub-rule compliance and each layer's forward/backward, bound to the
real Transformers module it replaces, against a float64 run of that module.

A layer's `forward` is called with the adopting module as `self`, exactly as
`kernels.kernelize` binds it; the functional op it should reach is spied on, so a
test fails if the layer silently took its eager fallback (or fused when it must not).
"""

import copy
import types

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from conftest import spy
from kernels.layer.layer import _validate_layer
from transformers import BertConfig, GemmaConfig, T5Config
from transformers.activations import (
    ACT2FN,
    FastGELUActivation,
    GELUActivation,
    GELUTanh,
    NewGELUActivation,
    SiLUActivation,
)
from transformers.integrations.finegrained_fp8 import FP8Linear as TransformersFP8Linear
from transformers.models.bert.modeling_bert import BertIntermediate
from transformers.models.gemma.modeling_gemma import GemmaMLP
from transformers.models.gemma2.modeling_gemma2 import Gemma2MLP
from transformers.models.gemma3.modeling_gemma3 import Gemma3MLP
from transformers.models.gemma4.modeling_gemma4 import Gemma4TextConfig, Gemma4TextMLP
from transformers.models.t5.modeling_t5 import T5DenseGatedActDense
from transformers.models.t5gemma.modeling_t5gemma import T5GemmaMLP, T5GemmaModuleConfig
from transformers.models.vaultgemma.modeling_vaultgemma import VaultGemmaConfig, VaultGemmaMLP

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]
DTYPES = [torch.float32, torch.bfloat16]
# Max error relative to the largest reference magnitude, against float64.
TOL = {torch.float32: 2e-5, torch.bfloat16: 2e-2, torch.float16: 4e-3}
# GPU GEMMs may run float32 through TF32 (10-bit mantissa).
GEMM_TOL = {("cuda", torch.float32): 3e-3}

HIDDEN, INTER = 64, 160


def tol(device, dtype, gemm=False):
    return GEMM_TOL.get((device, dtype), TOL[dtype]) if gemm else TOL[dtype]


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.double(), ref.double()
    return ((out - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()


def as_float64(module: nn.Module) -> nn.Module:
    return copy.deepcopy(module).to(torch.float64)


def call_layer(layer_cls, module, *args):
    """What kernelize installs: the layer's forward bound to the adopting module."""
    return layer_cls.forward(module, *args)


def check_grads(out, ref, tensors, ref_tensors, bound):
    """Backprop one random cotangent through both graphs; compare every input grad."""
    grad = torch.randn_like(ref)
    out.backward(grad.to(out.dtype))
    ref.backward(grad)
    for t, r in zip(tensors, ref_tensors):
        assert rel_err(t.grad, r.grad) < bound, f"grad {tuple(t.shape)}: {rel_err(t.grad, r.grad):.2e}"


# --------------------------------------------------------------------------- Hub rules


def kernels_community_style(name):
    class Ref(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x

    Ref.__name__ = name
    return Ref


REPLACES = [
    ("GeluTanh", GELUTanh),
    ("GeluTanh", NewGELUActivation),
    ("GeluTanh", FastGELUActivation),
    ("Gelu", GELUActivation),
    ("GeluTanhAndMul", kernels_community_style("GeluTanhAndMul")),
    ("GeluAndMul", kernels_community_style("GeluAndMul")),
    ("GeGLUMLP", GemmaMLP),
    ("GeGLUMLP", Gemma2MLP),
    ("GeGLUMLP", Gemma3MLP),
    ("GeGLUMLP", Gemma4TextMLP),
    ("GeGLUMLP", VaultGemmaMLP),
    ("T5GemmaMLP", T5GemmaMLP),
    ("T5GatedGeluDense", T5DenseGatedActDense),
    ("BiasGeluIntermediate", BertIntermediate),
    ("FP8Linear", TransformersFP8Linear),
]


@pytest.mark.parametrize("layer_name,replaced", REPLACES, ids=lambda v: getattr(v, "__name__", v))
def test_layer_follows_hub_rules(kernel, layer_name, replaced):
    """kernels' own validation (no __init__, no extra members, forward signature
    compatible with the replaced module's) plus the flags it reads."""
    layer = getattr(kernel.layers, layer_name)
    _validate_layer(check_cls=replaced, cls=layer, repo=f"geglu layer {layer_name}")
    assert layer.__init__ is nn.Module.__init__
    extra = set(vars(layer)) - {"__module__", "__doc__", "__annotations__", "__qualname__", "forward"}
    extra -= {"__firstlineno__", "__static_attributes__", "__annotate_func__", "__annotations_cache__"}
    assert extra <= {"has_backward", "can_torch_compile"}, extra
    assert layer.can_torch_compile is True
    # Standalone GELU writes through an out= kernel: no autograd, declared so.
    assert layer.has_backward is (layer_name not in ("GeluTanh", "Gelu"))


def test_layers_module_exports_every_layer(kernel):
    names = {name for name, _ in REPLACES}
    assert names <= set(kernel.layers.__all__)


def test_layers_public_names_are_its_layer_classes(kernel):
    """`geglu.layers` offers layers and nothing else: its public names, besides the
    libraries it is written in, are exactly the nn.Module classes it defines, and
    `__all__` lists them. The functional API it calls stays under private module
    aliases, so `from geglu.layers import *`, `dir` and the Hub's layer lookup see
    layer classes only."""
    layers = kernel.layers
    public = {name: getattr(layers, name) for name in dir(layers) if not name.startswith("_")}
    libraries = {name for name, value in public.items() if isinstance(value, types.ModuleType)}
    assert libraries <= {"F", "nn", "sys", "torch"}, libraries
    classes = {
        name
        for name, value in vars(layers).items()
        if isinstance(value, type) and issubclass(value, nn.Module) and value.__module__ == layers.__name__
    }
    assert set(public) - libraries == classes == set(layers.__all__)
    assert len(layers.__all__) == len(set(layers.__all__))
    assert {name for name, _ in REPLACES} == classes


# --------------------------------------------------------------------------- activations


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layer_name,approximate", [("GeluTanh", "tanh"), ("Gelu", "none")])
def test_gelu_layers(kernel, device, dtype, layer_name, approximate):
    layer = getattr(kernel.layers, layer_name)()
    x = torch.randn(3, 5, 96, device=device).to(dtype) * 3
    out = layer(x)
    assert out.shape == x.shape and out.dtype == dtype and out.data_ptr() != x.data_ptr()
    ref = F.gelu(x.double(), approximate=approximate)
    assert rel_err(out, ref) < tol(device, dtype)
    # A transposed (non-contiguous) input gives the same values.
    xt = x.transpose(0, 1)
    assert rel_err(layer(xt), ref.transpose(0, 1)) < tol(device, dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layer_name", ["GeluTanh", "Gelu", "GeluTanhAndMul", "GeluAndMul"])
def test_activation_layers_compile_fullgraph(kernel, device, layer_name):
    """can_torch_compile = True holds: no graph break (fullgraph raises on one), same
    values. (The fused-GEMM layers compile inside whole models: test_transformers.)"""
    torch._dynamo.reset()
    layer = getattr(kernel.layers, layer_name)()
    x = torch.randn(6, 2 * 48, device=device)
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    assert rel_err(compiled(x), layer(x)) < 1e-6


def test_gelu_layers_pass_other_dtypes_to_torch(kernel):
    x = torch.randn(4, 8, dtype=torch.float64)
    assert torch.equal(kernel.layers.GeluTanh()(x), F.gelu(x, approximate="tanh"))
    assert torch.equal(kernel.layers.Gelu()(x), F.gelu(x))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layer_name,approximate", [("GeluTanhAndMul", "tanh"), ("GeluAndMul", "none")])
def test_gelu_and_mul_layers(kernel, device, dtype, layer_name, approximate):
    """kernels-community/activation semantics: gelu(x[..., :d]) * x[..., d:] into a new
    [..., d] tensor; plus a backward."""
    d = 48
    x = (torch.randn(4, 7, 2 * d, device=device) * 2).to(dtype).requires_grad_()
    x64 = x.detach().double().requires_grad_()
    out = getattr(kernel.layers, layer_name)()(x)
    ref = F.gelu(x64[..., :d], approximate=approximate) * x64[..., d:]
    assert out.shape == (4, 7, d) and out.dtype == dtype
    assert rel_err(out, ref) < tol(device, dtype)
    check_grads(out, ref, [x], [x64], 2 * tol(device, dtype))


# --------------------------------------------------------------------------- GeGLUMLP


def gemma_mlp(hidden_act: str, bias: str, device, dtype) -> GemmaMLP:
    mlp = GemmaMLP(GemmaConfig(hidden_size=HIDDEN, intermediate_size=INTER))
    # Set directly: GemmaConfig rewrites hidden_act="gelu" to the tanh GELU.
    mlp.act_fn = ACT2FN[hidden_act]
    if bias != "none":  # Gemma has none; a GeGLU MLP with biases must still be right
        with_bias = ("gate_proj", "up_proj", "down_proj") if bias == "all" else ("down_proj",)
        for name in with_bias:
            old = getattr(mlp, name)
            new = nn.Linear(old.in_features, old.out_features, bias=True)
            nn.init.normal_(new.bias, std=0.5)
            setattr(mlp, name, new)
    return mlp.to(device, dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "hidden_act,approximate", [("gelu_pytorch_tanh", "tanh"), ("gelu_new", "tanh"), ("gelu", "none")]
)
@pytest.mark.parametrize("bias", ["none", "all", "down"])
def test_geglu_mlp(kernel, monkeypatch, device, dtype, hidden_act, approximate, bias):
    """GeGLUMLP bound to a GemmaMLP: the GELU flavour comes from the module's act_fn;
    biases are honoured; forward and backward against the module in float64."""
    calls = spy(monkeypatch, kernel.linear, "mlp_layer_entry")
    mlp = gemma_mlp(hidden_act, bias, device, dtype)
    mlp64 = as_float64(mlp)
    x = torch.randn(2, 9, HIDDEN, device=device).to(dtype).requires_grad_()
    x64 = x.detach().double().requires_grad_()

    out = call_layer(kernel.layers.GeGLUMLP, mlp, x)
    ref = mlp64(x64)
    assert len(calls) == 1 and calls[0]["approximate"] == approximate
    assert out.shape == ref.shape and out.dtype == dtype
    bound = tol(device, dtype, gemm=True)
    assert rel_err(out, ref) < bound

    params = [p for p in mlp.parameters()]
    params64 = [p for p in mlp64.parameters()]
    check_grads(out, ref, [x, *params], [x64, *params64], 2 * bound)


def test_geglu_mlp_passes_the_modules_weights(kernel, monkeypatch):
    """The module's own parameters go to the kernel: no per-call copy, no cache that
    could go stale when an optimizer updates them."""
    seen = []

    def record(x, w_gate, w_up, w_down, *rest):
        seen.append((w_gate, w_up, w_down))
        return x.new_zeros(*x.shape[:-1], w_down.shape[0])

    monkeypatch.setattr(kernel.linear, "mlp_layer_entry", record)
    mlp = gemma_mlp("gelu_pytorch_tanh", "none", "cpu", torch.float32)
    call_layer(kernel.layers.GeGLUMLP, mlp, torch.randn(3, HIDDEN))
    assert len(seen) == 1
    w_gate, w_up, w_down = seen[0]
    assert w_gate is mlp.gate_proj.weight and w_up is mlp.up_proj.weight and w_down is mlp.down_proj.weight


@pytest.mark.parametrize("hidden_act", ["silu", "gelu_10", "quick_gelu"])
def test_geglu_mlp_other_activation_runs_the_module(kernel, monkeypatch, hidden_act):
    """An activation the kernels do not compute: the layer runs the module's own
    computation (same result bit for bit) instead of guessing."""
    calls = spy(monkeypatch, kernel.linear, "mlp_layer_entry")
    mlp = gemma_mlp(hidden_act, "none", "cpu", torch.float32)
    x = torch.randn(2, 5, HIDDEN)
    assert torch.equal(call_layer(kernel.layers.GeGLUMLP, mlp, x), mlp(x))
    assert calls == []


def _scale_output(module, args, out):
    return out * 3.0


@pytest.mark.parametrize(
    "change",
    ["forward_hook", "forward_pre_hook", "instance_forward", "parametrized_weight"],
)
def test_geglu_mlp_honours_what_calling_a_linear_would_run(kernel, monkeypatch, change):
    """A projection whose call would run more than nn.Linear.forward on its parameters
    (a hook, a forward set on the instance as accelerate's offloading or another
    kernelize mapping does, a parametrized weight): the layer runs the module's own
    computation, so the hook or replacement still takes effect."""
    calls = spy(monkeypatch, kernel.linear, "mlp_layer_entry")
    mlp = gemma_mlp("gelu_pytorch_tanh", "none", "cpu", torch.float32)
    x = torch.randn(2, 5, HIDDEN)
    plain = mlp(x)
    up = mlp.up_proj
    if change == "forward_hook":
        up.register_forward_hook(_scale_output)
    elif change == "forward_pre_hook":
        up.register_forward_pre_hook(lambda module, args: (args[0] * 2.0,))
    elif change == "instance_forward":
        up.forward = lambda h: F.linear(h, up.weight) * 3.0
    else:
        nn.utils.parametrize.register_parametrization(up, "weight", _Doubled())
    out = call_layer(kernel.layers.GeGLUMLP, mlp, x)
    assert calls == []
    assert torch.equal(out, mlp(x)) and not torch.allclose(out, plain)


class _Doubled(nn.Module):
    def forward(self, w):
        return 2.0 * w


class _TaggedTensor(torch.Tensor):
    """A tensor subclass (as a quantized or sharded parameter would be): not dense."""


@pytest.mark.parametrize("which", ["weight", "bias"])
def test_geglu_mlp_tensor_subclass_parameter_runs_the_module(kernel, monkeypatch, which):
    """A projection whose weight or bias is a tensor subclass: the fused call, which
    reads plain tensors (and is handed them without a second check), is not taken;
    the module's own computation runs."""
    calls = spy(monkeypatch, kernel.linear, "mlp_layer_entry")
    mlp = gemma_mlp("gelu_pytorch_tanh", "all", "cpu", torch.float32)
    x = torch.randn(2, 5, HIDDEN)
    up = mlp.up_proj  # gate/up are then not fused either: the result is the module's, bit for bit
    old = getattr(up, which)
    up._parameters[which] = nn.Parameter(old.detach().clone().as_subclass(_TaggedTensor))
    assert type(up._parameters[which]) is _TaggedTensor
    out = call_layer(kernel.layers.GeGLUMLP, mlp, x)
    assert calls == []
    assert torch.equal(out, mlp(x))


def test_geglu_mlp_under_autocast_runs_the_module(kernel, monkeypatch):
    """Under autocast nn.Linear computes in the autocast dtype: keep that behaviour."""
    calls = spy(monkeypatch, kernel.linear, "mlp_layer_entry")
    mlp = gemma_mlp("gelu_pytorch_tanh", "none", "cpu", torch.float32)
    x = torch.randn(2, 5, HIDDEN)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = call_layer(kernel.layers.GeGLUMLP, mlp, x)
        ref = mlp(x)
    assert calls == [] and out.dtype == ref.dtype == torch.bfloat16
    assert torch.equal(out, ref)


# --------------------------------------------------------------------------- T5GatedGeluDense


def t5_block(device, dtype, dropout=0.0) -> T5DenseGatedActDense:
    config = T5Config(d_model=HIDDEN, d_ff=INTER, feed_forward_proj="gated-gelu", dropout_rate=dropout)
    return T5DenseGatedActDense(config).to(device, dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_t5_gated_gelu_dense_eval_is_one_fused_mlp(kernel, monkeypatch, device, dtype):
    """T5 v1.1's gelu_new is the tanh GELU; with dropout inactive the block is one
    fused MLP."""
    calls = spy(monkeypatch, kernel.linear, "mlp_layer_entry")
    block = t5_block(device, dtype, dropout=0.1).eval()
    block64 = as_float64(block)
    x = torch.randn(2, 9, HIDDEN, device=device).to(dtype).requires_grad_()
    x64 = x.detach().double().requires_grad_()
    out = call_layer(kernel.layers.T5GatedGeluDense, block, x)
    ref = block64(x64)
    assert len(calls) == 1 and calls[0]["approximate"] == "tanh"
    bound = tol(device, dtype, gemm=True)
    assert rel_err(out, ref) < bound
    check_grads(out, ref, [x, *block.parameters()], [x64, *block64.parameters()], 2 * bound)


@pytest.mark.parametrize("device", DEVICES)
def test_t5_gated_gelu_dense_training_applies_dropout(kernel, monkeypatch, device):
    """In training with dropout the block runs the fused gate/up GEMM, then T5's
    dropout (same RNG stream as the original: same seed, same mask), then wo."""
    calls = spy(monkeypatch, kernel.linear, "geglu_linear")
    block = t5_block(device, torch.float32, dropout=0.3).train()
    x = torch.randn(2, 9, HIDDEN, device=device)
    torch.manual_seed(7)
    out = call_layer(kernel.layers.T5GatedGeluDense, block, x)
    torch.manual_seed(7)
    ref = block(x)
    assert len(calls) == 1 and calls[0]["approximate"] == "tanh"
    assert rel_err(out, ref) < tol(device, torch.float32, gemm=True)
    torch.manual_seed(8)  # another mask: the output really depends on dropout
    assert rel_err(call_layer(kernel.layers.T5GatedGeluDense, block, x), ref) > 1e-2


@pytest.mark.parametrize("device", DEVICES)
def test_t5_gated_gelu_dense_keeps_wo_in_float32(kernel, device):
    """Transformers keeps T5's `wo` in float32 when loading in half precision; the
    block then casts the activations to float32 for `wo`, as the original does."""
    block = t5_block(device, torch.bfloat16).eval()
    block.wo.float()
    x = torch.randn(2, 9, HIDDEN, device=device).to(torch.bfloat16)
    out = call_layer(kernel.layers.T5GatedGeluDense, block, x)
    ref = block(x)
    assert out.dtype == ref.dtype == torch.float32
    assert rel_err(out, as_float64(block)(x.double())) < tol(device, torch.bfloat16)


# --------------------------------------------------------------------------- Gemma 4, VaultGemma, T5Gemma


def newer_gemma_mlp(kind: str, device, dtype, dropout: float = 0.0) -> nn.Module:
    """Gemma 4's double-wide MLP (the KV-shared layer of a model with use_double_wide_mlp:
    2 x intermediate), VaultGemma's, or T5Gemma's (a dropout between the projections)."""
    if kind == "gemma4 double-wide":
        config = Gemma4TextConfig(hidden_size=HIDDEN, intermediate_size=INTER // 2, num_hidden_layers=2,
                                  num_kv_shared_layers=1, use_double_wide_mlp=True)
        mlp = Gemma4TextMLP(config, layer_idx=1)
        assert mlp.intermediate_size == INTER
    elif kind == "vaultgemma":
        mlp = VaultGemmaMLP(VaultGemmaConfig(hidden_size=HIDDEN, intermediate_size=INTER))
    else:
        mlp = T5GemmaMLP(T5GemmaModuleConfig(hidden_size=HIDDEN, intermediate_size=INTER, dropout_rate=dropout))
    return mlp.to(device, dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["gemma4 double-wide", "vaultgemma", "t5gemma"])
def test_newer_gemma_mlps_are_one_fused_mlp(kernel, monkeypatch, device, dtype, kind):
    """Gemma 4's (double-wide included), VaultGemma's and T5Gemma's MLPs (tanh GELU; T5Gemma's
    dropout inactive: eval) run as one fused MLP; forward and backward against float64."""
    calls = spy(monkeypatch, kernel.linear, "mlp_layer_entry")
    mlp = newer_gemma_mlp(kind, device, dtype, dropout=0.1).eval()
    mlp64 = as_float64(mlp)
    x = torch.randn(2, 9, HIDDEN, device=device).to(dtype).requires_grad_()
    x64 = x.detach().double().requires_grad_()
    layer = kernel.layers.T5GemmaMLP if kind == "t5gemma" else kernel.layers.GeGLUMLP
    out = call_layer(layer, mlp, x)
    ref = mlp64(x64)
    assert len(calls) == 1 and calls[0]["approximate"] == "tanh"
    assert out.shape == ref.shape and out.dtype == dtype
    bound = tol(device, dtype, gemm=True)
    assert rel_err(out, ref) < bound
    check_grads(out, ref, [x, *mlp.parameters()], [x64, *mlp64.parameters()], 2 * bound)


@pytest.mark.parametrize("device", DEVICES)
def test_t5gemma_mlp_with_active_dropout_runs_the_module(kernel, monkeypatch, device):
    """In training with dropout p > 0 T5GemmaMLP is the module's own forward: same RNG
    stream, same mask, same output; the fused kernels are not called."""
    fused, gate_up = spy(monkeypatch, kernel.linear, "mlp_layer_entry"), spy(monkeypatch, kernel.linear, "geglu_linear")
    mlp = newer_gemma_mlp("t5gemma", device, torch.float32, dropout=0.3).train()
    x = torch.randn(2, 9, HIDDEN, device=device)
    torch.manual_seed(7)
    out = call_layer(kernel.layers.T5GemmaMLP, mlp, x)
    torch.manual_seed(7)
    assert torch.equal(out, mlp(x))
    assert fused == [] and gate_up == []
    torch.manual_seed(8)  # another mask: the output really depends on dropout
    assert rel_err(call_layer(kernel.layers.T5GemmaMLP, mlp, x), out) > 1e-2


# --------------------------------------------------------------------------- BiasGeluIntermediate


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden_act,approximate", [("gelu", "none"), ("gelu_new", "tanh")])
def test_bias_gelu_intermediate(kernel, monkeypatch, device, dtype, hidden_act, approximate):
    """Every GELU flavour it knows, on every device: linear_bias_gelu, whose native op
    picks the kernel (cuBLASLt's GELU_BIAS epilogue, the Hopper engine, or torch's GEMM
    and the package's GELU). Against the module in float64."""
    calls = spy(monkeypatch, kernel.linear, "linear_bias_gelu")
    inter = BertIntermediate(BertConfig(hidden_size=HIDDEN, intermediate_size=INTER, hidden_act=hidden_act))
    nn.init.normal_(inter.dense.bias, std=0.5)
    inter = inter.to(device, dtype)
    inter64 = as_float64(inter)
    x = torch.randn(2, 9, HIDDEN, device=device).to(dtype).requires_grad_()
    x64 = x.detach().double().requires_grad_()
    out = call_layer(kernel.layers.BiasGeluIntermediate, inter, x)
    ref = inter64(x64)
    assert len(calls) == 1 and calls[0]["approximate"] == approximate
    bound = tol(device, dtype, gemm=True)
    assert rel_err(out, ref) < bound
    check_grads(out, ref, [x, *inter.parameters()], [x64, *inter64.parameters()], 2 * bound)


def test_bias_gelu_intermediate_other_activation_runs_the_module(kernel, monkeypatch):
    calls = spy(monkeypatch, kernel.linear, "linear_bias_gelu")
    inter = BertIntermediate(BertConfig(hidden_size=HIDDEN, intermediate_size=INTER, hidden_act="relu"))
    x = torch.randn(2, 5, HIDDEN)
    assert torch.equal(call_layer(kernel.layers.BiasGeluIntermediate, inter, x), inter(x))
    assert calls == []


def test_activation_kind_is_read_from_the_module(kernel):
    """The flavour table the layers use, on Transformers' and torch's classes."""
    kind = kernel.layers._gelu_approximate
    assert kind(GELUTanh()) == kind(NewGELUActivation()) == kind(FastGELUActivation()) == "tanh"
    assert kind(GELUActivation()) == "none"
    assert kind(nn.GELU()) == "none" and kind(nn.GELU(approximate="tanh")) == "tanh"
    assert kind(SiLUActivation()) is None and kind(nn.ReLU()) is None
