"""geglu's layers inside CUDA graphs (issue 15, item 3): capturable and replayable.

Each layer of `layers`, kernelized onto the module it replaces (the recipe's mapping,
as test_transformers.py does) or instantiated (the kernels-community style
activations, as test_layers.py does), runs one forward captured in a
`torch.cuda.CUDAGraph` (after a warm-up on a side stream, as torch's CUDA-graph docs
prescribe: Triton compiles, cuBLAS handles and workspaces come into being there), then
replays on fresh random inputs copied into the static input. Each replay must match
the same layer called outside a graph (conftest's bf16 storage tolerance) and a float64
run of the eager module, at decode-like (1, 16) and prefill-like (512) token counts;
on a row width whose bf16 rows are 16-byte aligned (the Hopper engine's route on
sm_90) and one whose rows are not (Triton's). The output buffer is NaN-poisoned
before each replay, so a kernel that skips part of it shows.

On CPU the same harness runs without a graph (the `capture=False` protocol), which
checks the layers, the references and the harness; the capture itself needs a GPU.
"""

import copy
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import BertConfig, GemmaConfig, T5Config
from transformers.activations import GELUActivation, GELUTanh
from transformers.models.bert.modeling_bert import BertIntermediate
from transformers.models.gemma.modeling_gemma import GemmaMLP
from transformers.models.t5.modeling_t5 import T5DenseGatedActDense

from conftest import REPO, STORAGE_TOLERANCE

sys.path.insert(0, str(REPO))

import example  # noqa: E402  (the recipe: mapping and local layers)
from kernels import Mode, kernelize, use_kernel_mapping  # noqa: E402

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]
DTYPE = torch.bfloat16
TOKENS = [1, 16, 512]
# (hidden, intermediate). 256 / 1024: bf16 rows of 512 / 2048 bytes; 100 / 328: 200 /
# 656 bytes, not 16-byte aligned (the Hopper engine refuses them: Triton's route).
SHAPES = [(256, 1024), (100, 328)]
LAYERS = ["GeGLUMLP", "T5GatedGeluDense", "BiasGeluIntermediate", "Gelu", "GeluTanh", "GeluTanhAndMul", "GeluAndMul"]
# Max error relative to the largest float64 reference magnitude (test_layers' bf16 bound).
REL_TOL = 2e-2


@pytest.fixture(scope="module")
def layer(kernel):
    """LocalLayerRepository on this checkout's build/ (the variant `kernel` loaded)."""
    return lambda layer_name: example.local_layer(layer_name, path=REPO)


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.double(), ref.double()
    return ((out - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()


def forward_owner(module) -> str:
    """The class whose `forward` the module runs now."""
    return module.forward.__func__.__qualname__.split(".")[0]


def kernelized(module: nn.Module, device: str, layer) -> nn.Module:
    """The recipe's mapping, kernelized for inference on `device` (in place)."""
    with use_kernel_mapping(example.geglu_mapping(layer)):
        return kernelize(module, mode=Mode.INFERENCE, device=device)


def gelu_and_mul_reference(approximate: str):
    def ref(x):
        d = x.shape[-1] // 2
        return F.gelu(x[..., :d], approximate=approximate) * x[..., d:]

    return ref


def layer_case(name: str, hidden: int, inter: int, device: str, kernel, layer):
    """(the layer as a model runs it, a float64 reference callable, input width)."""
    if name in ("GeluTanhAndMul", "GeluAndMul"):  # no Transformers module: the layer itself
        approximate = "tanh" if name == "GeluTanhAndMul" else "none"
        return getattr(kernel.layers, name)(), gelu_and_mul_reference(approximate), 2 * inter
    if name == "GeGLUMLP":
        module = GemmaMLP(GemmaConfig(hidden_size=hidden, intermediate_size=inter, hidden_act="gelu_pytorch_tanh"))
        width = hidden
    elif name == "T5GatedGeluDense":  # eval: dropout inactive, one fused MLP
        config = T5Config(d_model=hidden, d_ff=inter, feed_forward_proj="gated-gelu", dropout_rate=0.1)
        module = T5DenseGatedActDense(config)
        width = hidden
    elif name == "BiasGeluIntermediate":  # BERT's exact GELU, with a bias
        module = BertIntermediate(BertConfig(hidden_size=hidden, intermediate_size=inter, hidden_act="gelu"))
        nn.init.normal_(module.dense.bias, std=0.5)
        width = hidden
    elif name == "GeluTanh":
        module, width = GELUTanh(), inter
    elif name == "Gelu":
        module, width = GELUActivation(), inter
    else:
        raise ValueError(name)
    module = module.to(device, DTYPE).eval()
    reference = copy.deepcopy(module).to(torch.float64)
    module = kernelized(module, device, layer)
    assert forward_owner(module) == name, f"kernelize did not swap in {name}: runs {forward_owner(module)}"
    return module, reference, width


def replay_outputs(fn, static_input: torch.Tensor, inputs, capture: bool) -> list:
    """fn's output for each of `inputs`, copied one after the other into `static_input`.

    capture=True: warm up on a side stream, capture one fn(static_input) in a CUDA graph,
    then per input: copy it in, NaN-poison the graph's output, replay, clone the output.
    capture=False: the same protocol with fn called directly (no GPU needed)."""
    if capture:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                fn(static_input)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_output = fn(static_input)
        assert static_output.data_ptr() != static_input.data_ptr()
    outputs = []
    for x in inputs:
        static_input.copy_(x)
        if capture:
            static_output.fill_(float("nan"))
            graph.replay()
        else:
            static_output = fn(static_input)
        outputs.append(static_output.clone())
    if capture:
        torch.cuda.synchronize()
    return outputs


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("hidden,inter", SHAPES, ids=["aligned", "unaligned"])
@pytest.mark.parametrize("tokens", TOKENS)
@pytest.mark.parametrize("name", LAYERS)
def test_layer_replays_in_a_cuda_graph(kernel, layer, name, tokens, hidden, inter, device):
    torch.manual_seed(LAYERS.index(name) * 10_000 + tokens * 10 + SHAPES.index((hidden, inter)))
    module, reference, width = layer_case(name, hidden, inter, device, kernel, layer)
    scale = 3.0 if name.startswith("Gelu") else 1.0  # activations: cover both GELU tails
    make = lambda: (torch.randn(tokens, width, device=device) * scale).to(DTYPE)  # noqa: E731
    static_input = make()
    inputs = [make() for _ in range(3)]
    with torch.no_grad():
        outputs = replay_outputs(module, static_input, inputs, capture=device == "cuda")
        for x, out in zip(inputs, outputs):
            direct = module(x)
            assert out.shape == direct.shape and out.dtype == direct.dtype == DTYPE
            assert not out.isnan().any(), "the replay left part of its output unwritten"
            torch.testing.assert_close(out, direct, **STORAGE_TOLERANCE[DTYPE])
            err = rel_err(out, reference(x.double()))
            assert err < REL_TOL, f"{name} replay vs float64 eager module: {err:.2e}"
        # Replays follow their inputs (nothing stale from the captured one).
        assert not torch.equal(outputs[0], outputs[1])

