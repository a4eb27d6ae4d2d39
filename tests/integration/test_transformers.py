"""Kernelizing real Transformers models with geglu's layers.

Small models of real classes (Gemma, Gemma2, Gemma3, T5 v1.1 gated-GELU, BERT) with
random weights, kernelized through the recipe in example.py (the README's code): the
kernelized model must give the original's logits, greedy tokens and training step,
compile with fullgraph=True, and keep the original forward where a layer cannot
serve the requested mode. CPU in CI; the `cuda` parameters run on a GPU.
"""

import copy
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from conftest import REPO, inductor_graphs_backend
sys.path.insert(0, str(REPO))

import example  # noqa: E402  (the recipe under test: the README's code)
from kernels import LocalLayerRepository, Mode, kernelize, use_kernel_mapping  # noqa: E402

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]
GENERATIVE = ["gemma", "gemma4", "t5gemma", "t5"]
ALL_MODELS = ["gemma", "gemma2", "gemma3", "gemma4", "vaultgemma", "t5gemma", "t5", "bert"]
# Per model: the hub names whose forwards the recipe swaps in inference (and how many).
SWAPPED_INFERENCE = {
    "gemma": {"GeGLUMLP": 2, "GeluTanh": 2},
    "gemma2": {"GeGLUMLP": 2, "GeluTanh": 2},
    "gemma3": {"GeGLUMLP": 2, "GeluTanh": 2},
    "gemma4": {"GeGLUMLP": 3, "GeluTanh": 6},  # + each layer's per-layer-input gate
    "vaultgemma": {"GeGLUMLP": 2, "GeluTanh": 2},
    "t5gemma": {"T5GemmaMLP": 4, "GeluTanh": 4},  # 2 encoder + 2 decoder layers
    "t5": {"T5GatedGeluDense": 4, "NewGELU": 4},  # 2 encoder + 2 decoder blocks
    "bert": {"BiasGeluIntermediate": 2, "GeLU": 3},  # + the MLM head's transform
}


@pytest.fixture(scope="module")
def layer(kernel):
    """The recipe's local form: LocalLayerRepository on this checkout's build/ (the
    variant the `kernel` fixture loaded, so one copy of the ops in the process)."""
    return lambda layer_name: example.local_layer(layer_name, path=REPO)


def model_dtype(device: str) -> torch.dtype:
    # CPU: float32, where kernels and eager agree to ~1e-6. GPU: bf16, as deployed.
    return torch.float32 if device == "cpu" else torch.bfloat16


def build(kind: str, device: str, dtype=None, **kw):
    return example.tiny_model(kind, **kw).to(device, dtype or model_dtype(device))


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.double(), ref.double()
    return ((out - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()


def logits(model, inputs) -> torch.Tensor:
    with torch.no_grad():
        return model(**inputs, use_cache=False).logits.float()


def assert_close_to_original(kernelized, original, inputs, reference=None):
    """float32: kernelized within 1e-4 of the original (relative to the largest logit).
    Half precision: kernelized no further from a float32 reference than 2x the
    original's own rounding error (or 1e-2)."""
    out, ref = logits(kernelized, inputs), logits(original, inputs)
    if reference is None:
        assert rel_err(out, ref) < 1e-4, f"logits differ: {rel_err(out, ref):.2e}"
        return
    exact = logits(reference, inputs)
    err_k, err_e = rel_err(out, exact), rel_err(ref, exact)
    assert err_k <= max(2 * err_e, 1e-2), f"kernelized error {err_k:.2e} vs eager {err_e:.2e}"


# --------------------------------------------------------------------------- inference


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ALL_MODELS)
def test_kernelized_logits_match(kind, device, layer):
    original = build(kind, device).eval()
    model = example.kernelize_with_geglu(copy.deepcopy(original), mode=Mode.INFERENCE, layer=layer)
    assert example.count_kernelized(model) == SWAPPED_INFERENCE[kind]
    inputs = example.model_inputs(model)
    reference = None if model_dtype(device) == torch.float32 else build(kind, device, torch.float32).eval()
    assert_close_to_original(model, original, inputs, reference)


def assert_same_greedy(original, prompt: dict, tokens_ref, tokens, dtype):
    """Greedy tokens equal; in half precision a first divergence is accepted only where
    the original model's two candidate logits tie within rounding."""
    if torch.equal(tokens_ref, tokens):
        return
    assert dtype != torch.float32, f"greedy tokens differ:\n{tokens_ref}\n{tokens}"
    n = min(tokens_ref.shape[1], tokens.shape[1])
    pos = int((tokens_ref[:, :n] != tokens[:, :n]).any(0).nonzero()[0])
    with torch.no_grad():
        if original.config.is_encoder_decoder:
            out = original(**prompt, decoder_input_ids=tokens[:, :pos]).logits[:, -1].float()
        else:
            out = original(input_ids=tokens[:, :pos]).logits[:, -1].float()
    rows = (tokens_ref[:, pos] != tokens[:, pos]).nonzero().flatten()
    gap = (out[rows, tokens_ref[rows, pos]] - out[rows, tokens[rows, pos]]).abs().max().item()
    assert gap <= 2e-2 * out.abs().max().item(), f"tokens diverge at {pos} with a logit gap of {gap:.3e}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", GENERATIVE)
def test_generate_same_greedy_tokens(kind, device, layer):
    original = build(kind, device).eval()
    model = example.kernelize_with_geglu(copy.deepcopy(original), mode=Mode.INFERENCE, layer=layer)
    prompt = {"input_ids": example.model_inputs(model, seq=8)["input_ids"]}
    gen = dict(max_new_tokens=10, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        tokens_ref = original.generate(**prompt, **gen)
        tokens = model.generate(**prompt, **gen)
    assert_same_greedy(original, prompt, tokens_ref, tokens, model_dtype(device))


# --------------------------------------------------------------------------- training


def loss_of(model, inputs) -> torch.Tensor:
    labels = inputs.get("decoder_input_ids", inputs["input_ids"])
    return model(**inputs, labels=labels, use_cache=False).loss


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["gemma", "t5", "bert"])
def test_training_step_matches(kind, device, layer):
    """Mode.TRAINING: same loss, same gradients, same weights after one SGD step.
    T5 trains with dropout 0.1, so its gated-GELU layer takes the unfused path with
    dropout; the same seed gives both models the same masks."""
    # float32 on GPU too: the comparison is about gradients, not bf16 rounding.
    original = build(kind, device, torch.float32, dropout=0.1 if kind == "t5" else 0.0).train()
    model = example.kernelize_with_geglu(copy.deepcopy(original), mode=Mode.TRAINING, layer=layer)
    swapped = example.count_kernelized(model)
    # Fused-GEMM layers serve training; the activations (no backward) keep the original.
    mlp_name = {"gemma": "GeGLUMLP", "t5": "T5GatedGeluDense", "bert": "BiasGeluIntermediate"}[kind]
    assert swapped == {mlp_name: SWAPPED_INFERENCE[kind][mlp_name]}

    tol = 1e-4 if device == "cpu" else 1e-2  # GPU GEMMs may run float32 as TF32
    inputs = example.model_inputs(model)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (original, model)]
    losses = []
    for m, opt in zip((original, model), opts):
        torch.manual_seed(1234)
        loss = loss_of(m, inputs)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    assert rel_err(losses[1], losses[0]) < tol

    pairs = [(n, p_ref, p) for (n, p_ref), (_, p) in zip(original.named_parameters(), model.named_parameters())]
    assert all((p_ref.grad is None) == (p.grad is None) for _, p_ref, p in pairs)
    pairs = [pair for pair in pairs if pair[1].grad is not None]
    assert len(pairs) > 10
    # Some gradients are zero in exact arithmetic (attention key biases: softmax ignores
    # a per-query shift) and pure rounding noise here; measure every gradient against
    # at least a thousandth of the model's largest one.
    # The same for weights after the step (BERT's biases start at zero).
    def err_with_floor(a, b, floor):
        return (a - b).abs().max().item() / max(b.abs().max().item(), floor)

    grad_floor = 1e-3 * max(p_ref.grad.abs().max().item() for _, p_ref, _ in pairs)
    weight_floor = 1e-3 * max(p_ref.detach().abs().max().item() for _, p_ref, _ in pairs)
    for name, p_ref, p in pairs:
        assert err_with_floor(p.grad, p_ref.grad, grad_floor) < tol, f"grad of {name}"
        assert err_with_floor(p.detach(), p_ref.detach(), weight_floor) < tol, f"{name} after the step"

    torch.manual_seed(99)
    loss_ref = loss_of(original, inputs)
    torch.manual_seed(99)
    assert rel_err(loss_of(model, inputs), loss_ref) < tol


# --------------------------------------------------------------------------- torch.compile


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["gemma", "t5", "bert"])
def test_compiles_fullgraph(kind, device, layer):
    """Mode.INFERENCE | Mode.TORCH_COMPILE, then torch.compile(fullgraph=True): no graph
    breaks (a break raises). aot_eager runs dynamo + AOT autograd + functionalization
    over the custom ops' fake implementations without inductor's build time; the GPU
    also runs Gemma through inductor, as deployed."""
    torch._dynamo.reset()
    original = build(kind, device).eval()
    model = example.kernelize_with_geglu(
        copy.deepcopy(original), mode=Mode.INFERENCE | Mode.TORCH_COMPILE, layer=layer
    )
    assert example.count_kernelized(model) == SWAPPED_INFERENCE[kind]
    backend = "inductor" if device == "cuda" and kind == "gemma" else "aot_eager"
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    inputs = example.model_inputs(model)
    reference = None if model_dtype(device) == torch.float32 else build(kind, device, torch.float32).eval()
    assert_close_to_original(compiled, original, inputs, reference)


GEMM_OPS = {f"aten.{name}.default" for name in ("mm", "addmm", "bmm", "baddbmm")}


def gemms(ops) -> int:
    """GEMM calls in a graph's Counter of ops."""
    return sum(n for op, n in ops.items() if op in GEMM_OPS)


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_training_is_the_model_compiled_alone(device, layer, kernel):
    """Mode.TRAINING | Mode.TORCH_COMPILE, then torch.compile(fullgraph=True), training:
    Inductor receives the forward and backward graphs it gets compiling the model alone,
    op for op (GEMMs, the GELU it fuses with the product each way, no op of this package
    it could not fuse), with the same tensors saved for the backward; no graph break;
    the same loss and gradients. Kernelizing for compiled training then costs nothing
    against compiling the model alone."""
    original = build("gemma", device).train()
    kernelized = example.kernelize_with_geglu(
        copy.deepcopy(original), mode=Mode.TRAINING | Mode.TORCH_COMPILE, layer=layer
    )
    assert example.count_kernelized(kernelized) == {"GeGLUMLP": 2}
    inputs = example.model_inputs(original)
    graphs, losses, grads = {}, {}, {}
    for name, model in (("alone", original), ("kernelized", kernelized)):
        torch._dynamo.reset()
        graphs[name] = {}
        compiled = torch.compile(model, fullgraph=True, backend=inductor_graphs_backend(graphs[name]))
        loss = loss_of(compiled, inputs)
        loss.backward()
        losses[name] = loss.detach()
        grads[name] = {n: p.grad for n, p in model.named_parameters()}
    torch._dynamo.reset()

    namespace = kernel.linear.add_op_namespace_prefix("").rstrip(":")
    package_ops = [op for kind in ("forward", "backward") for g in graphs["kernelized"][kind] for op in g if namespace in op]
    assert not package_ops, f"opaque to Inductor: {package_ops}"
    for kind in ("forward", "backward"):
        got, want = graphs["kernelized"][kind], graphs["alone"][kind]
        assert [gemms(g) for g in got] == [gemms(g) for g in want], f"{kind} GEMMs"
        assert got == want, f"{kind} graphs differ"
    assert graphs["kernelized"]["saved"] == graphs["alone"]["saved"]

    # The same graphs: float32 gives the same numbers; in bf16 on a GPU, kernels that
    # accumulate with atomics (attention's backward) may round differently run to run.
    tol = 1e-5 if model_dtype(device) == torch.float32 else 2e-2
    assert rel_err(losses["kernelized"], losses["alone"]) < tol
    assert grads["kernelized"].keys() == grads["alone"].keys()
    for n, g in grads["alone"].items():
        assert g is not None and rel_err(grads["kernelized"][n], g) < tol, n


def installed_guards(model, inputs) -> dict:
    """The guards Dynamo installs compiling `model` (fullgraph, one training step), all
    evaluated before every call of the compiled model: "leaf", the checks of its C++ guard
    tree; "python", the parts of its Python-evaluated guards (object aliasing: `a is b`)."""
    import torch._dynamo.guards as dynamo_guards

    if not hasattr(dynamo_guards, "guard_manager_testing_hook_fn"):
        pytest.skip("this torch has no guard manager hook")
    managers = []

    def walk(manager) -> int:
        n = len(manager.get_leaf_guards())
        children = list(manager.get_child_managers())
        if hasattr(manager, "get_key_value_managers"):  # a dict's entries
            children += [m for pair in manager.get_key_value_managers().values() for m in pair if m is not None]
        return n + sum(walk(child) for child in children)

    torch._dynamo.reset()
    dynamo_guards.guard_manager_testing_hook_fn = lambda manager, scope, builder: managers.append(manager)
    try:
        loss_of(torch.compile(model, fullgraph=True, backend="eager"), inputs).backward()
    finally:
        dynamo_guards.guard_manager_testing_hook_fn = None
        torch._dynamo.reset()
    assert len(managers) == 1  # one graph: no break, no recompile
    root = managers[0].root
    python = sum(len(g.verbose_code_parts()) for g in root.get_epilogue_lambda_guards())
    return {"leaf": walk(root), "python": python}


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_training_guards_are_the_model_compiled_alone(device, layer):
    """Mode.TRAINING | Mode.TORCH_COMPILE, compiled: Dynamo guards what it guards compiling
    the model alone, checked before every training step. The reference is the model alone
    with `forward` bound on the same modules as kernelize binds it (an instance attribute,
    on the activations too, which keep their own forward in training): those bindings'
    guards are kernels', not the layers'. The layers may add only their test of
    compile-with-gradients (a module, a function and a builtin: three identity checks),
    whatever the layer count, and no Python-evaluated guard. Tracing the eager route
    instead (module state read through `__dict__`, the package's functions, constants and
    globals) adds 48 checks and 9 Python aliasing guards for two Gemma layers."""
    original = build("gemma", device).train()
    kernelized = example.kernelize_with_geglu(
        copy.deepcopy(original), mode=Mode.TRAINING | Mode.TORCH_COMPILE, layer=layer
    )
    assert example.count_kernelized(kernelized) == {"GeGLUMLP": 2}
    bound = copy.deepcopy(original)
    rebound = 0
    for module, kernelized_module in zip(bound.modules(), kernelized.modules()):
        if "forward" in vars(kernelized_module):
            module.forward = types.MethodType(type(module).forward, module)
            rebound += 1
    assert rebound == 4  # two MLPs and their two activations
    inputs = example.model_inputs(original)
    want, got = installed_guards(bound, inputs), installed_guards(kernelized, inputs)
    assert got["python"] <= want["python"], (got, want)
    assert got["leaf"] <= want["leaf"] + 3, (got, want)


# --------------------------------------------------------------------------- fallback


def forward_owner(module) -> str:
    """The class whose `forward` the module runs now."""
    return module.forward.__func__.__qualname__.split(".")[0]


def test_mode_a_layer_cannot_serve_keeps_the_original_forward(layer):
    """GeluTanh has no backward (has_backward = False). Mapped for every mode
    (Mode.FALLBACK), kernelize uses it for inference but keeps Transformers' own
    GELUTanh.forward for training, as `kernels` intends; with fallback disabled it
    refuses instead."""
    mapping = {"GeluTanh": {"cpu": layer("GeluTanh")}}
    act = example.tiny_model("gemma").model.layers[0].mlp.act_fn
    assert type(act).__name__ == "GELUTanh"
    with use_kernel_mapping(mapping, inherit_mapping=False):
        kernelize(act, mode=Mode.INFERENCE, device="cpu")
        assert forward_owner(act) == "GeluTanh"
        assert act.forward.__func__.__module__.endswith(".layers")  # geglu's layer

        kernelize(act, mode=Mode.TRAINING, device="cpu")
        assert forward_owner(act) == "GELUTanh"
        assert act.forward.__func__.__module__ == "transformers.activations"

        with pytest.raises(ValueError, match="does not support mode"):
            kernelize(act, mode=Mode.TRAINING, device="cpu", use_fallback=False)


def test_recipe_keeps_activations_original_in_training(layer):
    """The recipe maps the activations for inference modes only: in Mode.TRAINING
    kernelize finds no compatible mode and keeps their forward, while the fused MLP
    (which has a backward) is swapped."""
    model = example.kernelize_with_geglu(example.tiny_model("gemma").train(), mode=Mode.TRAINING, layer=layer)
    mlp = model.model.layers[0].mlp
    assert forward_owner(mlp) == "GeGLUMLP"
    assert forward_owner(mlp.act_fn) == "GELUTanh"


# --------------------------------------------------------------------------- the Hub form


def build_variants() -> list:
    return sorted(p.name for p in (REPO / "build").iterdir() if (p / "metadata.json").is_file())


@pytest.fixture(scope="module")
def staged_cache(tmp_path_factory, kernel) -> Path:
    """This build laid out as the HF cache of org/geglu's v1 branch (tools.build)."""
    from tools.build import read_config, stage_cache

    cache = tmp_path_factory.mktemp("hf_cache")
    stage_cache(read_config(REPO), REPO / "build", cache, build_variants())
    return cache


def run_example(*args, env_extra=None) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_KERNELS", "HF_HUB_OFFLINE", "HF_HUB_CACHE")}
    env.update(env_extra or {})
    res = subprocess.run(
        [sys.executable, str(REPO / "example.py"), *args], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


@pytest.mark.parametrize("source", ["local", "hub"])
def test_example_runs(source, staged_cache):
    """example.py end to end on CPU. "hub" is LayerRepository("org/geglu", version=1)
    resolved and loaded offline from the HF cache, as an air-gapped user runs it."""
    offline = {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(staged_cache)}
    kind = {"local": "bert", "hub": "t5"}[source]
    out = run_example("--source", source, "--model", kind, "--device", "cpu", env_extra=offline)
    assert f"kernelized {SWAPPED_INFERENCE[kind]}" in out
    assert out.strip().endswith("OK"), out


def excerpt(name: str) -> str:
    text = (REPO / "example.py").read_text()
    m = re.search(rf"# --8<-- \[start:{name}\]\n(.*?)# --8<-- \[end:{name}\]\n", text, re.S)
    assert m, f"example.py has no {name} markers"
    return m.group(1)


@pytest.mark.parametrize(
    "name,doc,section",
    [("recipe", "README.md", "## Use with Transformers"),
     ("transformers-switch", "docs/TRANSFORMERS.md", "## Transformers' switch")],
)
def test_docs_show_the_tested_code(name, doc, section):
    """The README's "Use with Transformers" section quotes example.py's recipe verbatim,
    and docs/TRANSFORMERS.md its use of Transformers' own switch."""
    text = (REPO / doc).read_text()
    assert section in text, f"{doc} has no {section!r} section"
    assert excerpt(name) in text, f"{doc} does not quote example.py's {name}"


# --------------------------------------------------------------------------- Transformers' switch


def pins(path: Path) -> dict:
    """{distribution: version} of every `name==version` pin in a setup file."""
    text = path.read_text()
    return {name.lower(): version for name, version in re.findall(r"(?<![\w.-])([A-Za-z][\w.-]*)==([\w.+]+)", text)}


def test_transformers_kernels_integration_is_on():
    """The pinned Transformers accepts the pinned `kernels`: its kernels integration is
    on, so `use_kernels=True` works with what requirements.txt installs. Transformers
    accepts one range of `kernels` releases per version (5.22: >=0.17.2,<0.18; 5.23
    and 5.24: >=0.18.2,<0.19) and silently turns its integration off outside it; this
    fails instead, on every CPU run."""
    import kernels
    import transformers
    from transformers.utils import import_utils

    required = pins(REPO / "requirements.txt")
    installed = {"transformers": transformers.__version__, "kernels": kernels.__version__}
    accepted = f">={import_utils.KERNELS_MIN_VERSION},<{import_utils.KERNELS_MAX_VERSION}"
    assert import_utils.is_kernels_available(), (
        f"transformers {transformers.__version__} accepts kernels {accepted}, installed is "
        f"kernels {kernels.__version__}: Transformers turned its kernels integration off"
    )
    assert {name: required[name] for name in installed} == installed, "not the environment requirements.txt pins"


# Files that install Transformers or `kernels` for tests and builds, beside requirements.txt.
SETUP_FILES = [
    ".github/workflows/build.yml",
    ".github/workflows/gpu-tests.yml",
    "scripts/build_cuda_variant.sh",
    "scripts/setup_torch_new.sh",
]


@pytest.mark.parametrize("path", SETUP_FILES)
def test_setup_files_pin_the_requirements_versions(path):
    """Every pin of transformers and kernels in the workflows and scripts is
    requirements.txt's (the GPU workflow and the CPU test jobs pin both)."""
    required = pins(REPO / "requirements.txt")
    found = pins(REPO / path)
    for name in ("transformers", "kernels"):
        if name in found:
            assert found[name] == required[name], f"{path} pins {name}=={found[name]}, requirements.txt {required[name]}"
    if path.startswith(".github/"):
        assert {"transformers", "kernels"} <= set(found), f"{path} does not pin transformers and kernels"


@pytest.fixture
def restore_kernel_mapping():
    """Transformers' set_use_kernels registers its default mapping (Liger, activation,
    rotary kernels on the Hub) globally: keep it out of the other tests."""
    from kernels.layer.globals import _KERNEL_MAPPING

    token = _KERNEL_MAPPING.set(copy.deepcopy(_KERNEL_MAPPING.get()))
    yield
    _KERNEL_MAPPING.reset(token)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("form", ["local", "hub", "from_pretrained"])
def test_transformers_use_kernels_switch(form, device, staged_cache, tmp_path, monkeypatch, restore_kernel_mapping):
    """Transformers' switch on a saved checkpoint: `set_use_kernels(True, KernelConfig)`
    with the local and the Hub form, and `from_pretrained(use_kernels=True,
    kernel_config=...)`. Its KernelConfig takes accelerators only (cuda, rocm, xpu, ...):
    on CPU the test adds "cpu" to that list, Transformers' only CPU obstacle (geglu's
    layers run on CPU tensors), so CI runs the whole switch with the pinned versions;
    the `cuda` parameters run it as users do (from_pretrained with device_map, which
    needs `accelerate`)."""
    import huggingface_hub.constants as hf_constants
    from transformers.utils import kernel_config

    from transformers.utils.import_utils import is_kernels_available

    assert is_kernels_available(), "the kernels integration is off: see test_transformers_kernels_integration_is_on"
    if device == "cpu":
        monkeypatch.setattr(kernel_config, "KERNELS_SUPPORTED_DEVICE_TYPES", [*kernel_config.KERNELS_SUPPORTED_DEVICE_TYPES, "cpu"])
    elif form == "from_pretrained":
        pytest.importorskip("accelerate", reason="from_pretrained(device_map=...) needs accelerate")

    # org/geglu v1 resolves from the staged cache (offline); files load from build/.
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(staged_cache))

    dtype = model_dtype(device)
    original = example.tiny_model("gemma").to(dtype).eval()
    original.save_pretrained(tmp_path)
    original = original.to(device)
    reference = None if dtype == torch.float32 else build("gemma", device, torch.float32).eval()
    inputs = example.model_inputs(original)

    if form == "from_pretrained":  # on CPU without device_map: the model loads there
        model = example.from_pretrained_with_geglu(str(tmp_path), device=None if device == "cpu" else device)
    else:
        loaded = type(original).from_pretrained(tmp_path, dtype=dtype).to(device).eval()
        model = example.enable_geglu_kernels(loaded, local_path=REPO if form == "local" else None)
    assert model.device.type == device and model.dtype == dtype
    assert example.count_kernelized(model) == {"GeGLUMLP": 2}
    assert model.model.layers[0].mlp.forward.__func__.__module__.endswith(".layers")  # geglu's layer
    assert_close_to_original(model, original, inputs, reference)
