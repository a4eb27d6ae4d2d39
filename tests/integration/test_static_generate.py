"""A kernelized Gemma under Transformers' compiled generation (issue 15, item 3).

`generate(cache_implementation="static")` compiles the model's decode step itself
(inductor, mode "reduce-overhead": CUDA graphs). The kernelized model must go through
that with no graph break and no "skipping cudagraphs" caused by geglu's layers or ops
(the op namespace starts with `_geglu_`), and generate what the original model
generates:

- every step's logits within bf16 rounding of a float32 run of the original on the
  same prefix (so the compiled, graph-replayed steps compute the right thing);
- greedy tokens equal to the original's eager greedy tokens, a divergence accepted
  only where the original's own two candidate logits tie within rounding
  (test_transformers.assert_same_greedy);
- a second call (a fresh static cache, graphs replayed or re-recorded) as right as
  the first.

Where a graph break or a cudagraph skip shows up at all, the original model is run the
same way: the kernelized one may only have what the original has (Transformers' or
torch's own), and none of it may name geglu.

On a GPU: inductor with CUDA graphs. On CPU the same test runs through the aot_eager
backend without graphs (Transformers compiles on CPU only when asked), which checks
the tracing of the kernelized layers and the test's own logic.
"""

import contextlib
import copy
import logging
import sys
import warnings
from pathlib import Path

import pytest
import torch

from conftest import REPO

sys.path.insert(0, str(REPO))

import example  # noqa: E402
from kernels import Mode  # noqa: E402
from test_transformers import assert_same_greedy, rel_err  # noqa: E402

pytestmark = pytest.mark.slow
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]
NEW_TOKENS = 16


@pytest.fixture(scope="module")
def layer(kernel):
    return lambda layer_name: example.local_layer(layer_name, path=REPO)


# --------------------------------------------------------------------------- compile logs


class CompileLog:
    """What torch said while compiling: graph-break and cudagraph-skip messages (from
    its logs) and its counters (torch._dynamo.utils.counters) since the start."""

    def __init__(self):
        from torch._dynamo.utils import counters

        self.messages: list = []
        self._start_breaks = sum(counters["graph_break"].values())
        self._start_skips = counters["inductor"]["cudagraph_skips"]
        self._start_graphs = counters["stats"]["unique_graphs"]

    @property
    def graph_breaks(self) -> list:
        return [m for m in self.messages if "graph break" in m.lower()]

    @property
    def cudagraph_skips(self) -> list:
        return [m for m in self.messages if "skipping cudagraphs" in m.lower()]

    def counts(self) -> dict:
        from torch._dynamo.utils import counters

        return {
            "graph_breaks": sum(counters["graph_break"].values()) - self._start_breaks,
            "cudagraph_skips": counters["inductor"]["cudagraph_skips"] - self._start_skips,
            "graphs_compiled": counters["stats"]["unique_graphs"] - self._start_graphs,
        }


class _Keep(logging.Handler):
    def __init__(self, sink: list):
        super().__init__(level=logging.DEBUG)
        self.sink = sink

    def emit(self, record):
        try:
            self.sink.append(record.getMessage())
        except Exception:  # noqa: BLE001  (a message that does not format: keep its template)
            self.sink.append(str(record.msg))


@contextlib.contextmanager
def compile_log():
    """torch._logging's graph_breaks, perf_hints and cudagraphs artifacts on, their
    records kept. torch's loggers do not propagate past "torch._dynamo" /
    "torch._inductor" / "torch", so the handler goes on each of those."""
    import inspect

    log = CompileLog()
    wanted = {"graph_breaks": True, "perf_hints": True, "cudagraphs": True}
    accepted = inspect.signature(torch._logging.set_logs).parameters
    torch._logging.set_logs(**{k: v for k, v in wanted.items() if k in accepted})
    handler = _Keep(log.messages)
    loggers = [logging.getLogger(name) for name in ("torch", "torch._dynamo", "torch._inductor")]
    for lg in loggers:
        lg.addHandler(handler)
    try:
        yield log
    finally:
        for lg in loggers:
            lg.removeHandler(handler)
        torch._logging.set_logs()


def geglu_markers(kernel) -> tuple:
    """What shows that a message is about geglu: its op namespace (torch.ops._geglu_...)
    and the directory kernels loaded the layers from (their frames in a traceback).
    Not the word "geglu" alone: the checkout's own path may contain it."""
    here = Path(kernel.__file__).parent
    return ("_geglu_", str(here), str(here.resolve()))


def mentioning(messages, markers) -> list:
    return [m for m in messages if any(marker in m for marker in markers)]


# --------------------------------------------------------------------------- generation


def compile_config(device: str):
    """Transformers' CompileConfig for generate(): its defaults on a GPU (inductor,
    "reduce-overhead", i.e. CUDA graphs), named explicitly so a change of defaults
    cannot turn the graphs off unnoticed; aot_eager on CPU, where Transformers compiles
    only when asked (_compile_all_devices)."""
    from transformers import CompileConfig

    if device == "cuda":
        return CompileConfig(backend="inductor", mode="reduce-overhead")
    config = CompileConfig(backend="aot_eager", mode="default")
    config._compile_all_devices = True
    return config


def gen_kwargs() -> dict:
    # min_new_tokens: EOS suppressed, every call generates NEW_TOKENS tokens.
    return dict(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)


def static_generate(model, prompt, device):
    """(sequences, per-step raw logits) of a compiled static-cache greedy generate()."""
    with torch.no_grad():
        out = model.generate(
            input_ids=prompt,
            cache_implementation="static",
            compile_config=compile_config(device),
            output_logits=True,
            return_dict_in_generate=True,
            **gen_kwargs(),
        )
    return out.sequences, out.logits


def cuda_graphs_recorded(device: str):
    """Graphs cudagraph trees recorded on this GPU so far (None: not readable in this
    torch, the check is then skipped)."""
    try:
        from torch._inductor.cudagraph_trees import get_manager

        manager = get_manager(torch.device(device).index or 0, create_if_none_exists=False)
        return 0 if manager is None else sum(len(nodes) for nodes in manager.roots.values())
    except Exception:  # noqa: BLE001  (private API: absent or changed)
        return None


def assert_steps_close(sequences, step_logits, prompt_len, original, reference):
    """Each generated step's logits against a float32 run of the original on the same
    prefix, no further than 2x the bf16 original's own error (or 2e-2 of the largest
    logit): a wrong or stale graph replay is off by O(1)."""
    errors, own = [], []
    with torch.no_grad():
        for step, logits in enumerate(step_logits):
            prefix = sequences[:, : prompt_len + step]
            exact = reference(input_ids=prefix).logits[:, -1].float()
            errors.append(rel_err(logits.float(), exact))
            own.append(rel_err(original(input_ids=prefix).logits[:, -1].float(), exact))
    bound = max(2 * max(own), 2e-2)
    worst = max(range(len(errors)), key=errors.__getitem__)
    assert errors[worst] <= bound, (
        f"step {worst}: logits off by {errors[worst]:.2e} (bound {bound:.2e}; all steps: "
        + ", ".join(f"{e:.1e}" for e in errors)
        + ")"
    )


@pytest.mark.parametrize("device", DEVICES)
def test_static_cache_generate_compiles_kernelized_layers(device, kernel, layer):
    torch._dynamo.reset()
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    original = example.tiny_model("gemma").to(device, dtype).eval()
    reference = example.tiny_model("gemma").to(device, torch.float32).eval()
    model = example.kernelize_with_geglu(
        copy.deepcopy(original), mode=Mode.INFERENCE | Mode.TORCH_COMPILE, layer=layer
    )
    assert example.count_kernelized(model) == {"GeGLUMLP": 2, "GeluTanh": 2}

    prompts = [example.model_inputs(model, batch=2, seq=8, seed=seed)["input_ids"] for seed in (1, 2)]
    graphs_before = cuda_graphs_recorded(device) if device == "cuda" else None
    runs = []
    with compile_log() as log:
        for prompt in prompts:  # the second call: a fresh static cache, compiled code reused
            runs.append(static_generate(model, prompt, device))
    counts = log.counts()
    assert counts["graphs_compiled"] > 0, "generate() did not compile the decode step"

    # Correctness of what the compiled, graph-replayed steps produced.
    for prompt, (sequences, step_logits) in zip(prompts, runs):
        assert sequences.shape == (prompt.shape[0], prompt.shape[1] + NEW_TOKENS)
        assert len(step_logits) == NEW_TOKENS
        assert_steps_close(sequences, step_logits, prompt.shape[1], original, reference)
        with torch.no_grad():
            tokens_ref = original.generate(input_ids=prompt, **gen_kwargs())
        assert_same_greedy(original, {"input_ids": prompt}, tokens_ref, sequences, dtype)

    # Nothing of ours in torch's graph-break / cudagraph-skip messages.
    ours = geglu_markers(kernel)
    assert not mentioning(log.graph_breaks, ours), "\n\n".join(mentioning(log.graph_breaks, ours))
    assert not mentioning(log.cudagraph_skips, ours), "\n\n".join(mentioning(log.cudagraph_skips, ours))
    if device == "cuda":
        recorded = cuda_graphs_recorded(device)
        if recorded is not None and graphs_before is not None:
            assert recorded > graphs_before, "no CUDA graph was recorded"
    if counts["graph_breaks"] or counts["cudagraph_skips"] or log.graph_breaks or log.cudagraph_skips:
        assert_only_what_the_original_has(original, prompts, device, log, counts)


def fp8_tiny_gemma(device):
    """A 2-layer Gemma whose MLP projections are Transformers FP8Linear modules holding
    the block-quantized weights (the FineGrainedFP8 layout; widths multiples of 128)."""
    import transformers as tf
    from transformers.integrations.finegrained_fp8 import FP8Linear

    torch.manual_seed(0)
    config = tf.GemmaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=1, head_dim=64, vocab_size=128)
    model = tf.GemmaForCausalLM(config).to(device, torch.bfloat16).eval()
    for mlp in (m for m in model.modules() if type(m).__name__ == "GemmaMLP"):
        for name in ("gate_proj", "up_proj", "down_proj"):
            lin = getattr(mlp, name)
            n, k = lin.weight.shape
            blocks = lin.weight.detach().float().reshape(n // 128, 128, k // 128, 128)
            scale = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-12) / 448.0
            fp8 = FP8Linear(k, n, block_size=(128, 128), activation_scheme="dynamic").to(device)
            with torch.no_grad():
                fp8.weight.copy_((blocks / scale[:, None, :, None]).clamp(-448, 448).reshape(n, k).to(fp8.weight.dtype))
                fp8.weight_scale_inv.copy_(scale)
            setattr(mlp, name, fp8)
    return model


@pytest.mark.parametrize("device", DEVICES)
def test_static_cache_generate_compiles_kernelized_fp8_mlps(device, kernel, layer):
    """The same for FP8 MLPs: the kernelized layers run geglu_mlp_fp8 (on sm_90 the decode
    kernels at these token counts) inside the compiled, graph-replayed decode step, with
    no graph break or cudagraph skip of ours, and every step's logits as the kernelized
    model computes them eagerly on the same prefix (FP8 against FP8: only the summation
    order may differ)."""
    pytest.importorskip("transformers.integrations.finegrained_fp8")
    torch._dynamo.reset()
    model = example.kernelize_with_geglu(
        fp8_tiny_gemma(device), mode=Mode.INFERENCE | Mode.TORCH_COMPILE, layer=layer
    )
    assert example.count_kernelized(model).get("GeGLUMLP") == 2
    prompts = [torch.randint(0, 128, (2, 8), generator=torch.Generator().manual_seed(s)).to(device) for s in (1, 2)]
    with compile_log() as log:
        runs = [static_generate(model, prompt, device) for prompt in prompts]
    assert log.counts()["graphs_compiled"] > 0, "generate() did not compile the decode step"
    for prompt, (sequences, step_logits) in zip(prompts, runs):
        assert sequences.shape == (2, prompt.shape[1] + NEW_TOKENS) and len(step_logits) == NEW_TOKENS
        with torch.no_grad():
            for step, logits in enumerate(step_logits):
                eager = model(input_ids=sequences[:, : prompt.shape[1] + step]).logits[:, -1].float()
                assert rel_err(logits.float(), eager) <= 2e-2, f"step {step}"
    ours = geglu_markers(kernel)
    assert not mentioning(log.graph_breaks, ours), "\n\n".join(mentioning(log.graph_breaks, ours))
    assert not mentioning(log.cudagraph_skips, ours), "\n\n".join(mentioning(log.cudagraph_skips, ours))


def assert_only_what_the_original_has(original, prompts, device, log, counts):
    """Breaks or skips showed up: the original model, compiled and called the same way,
    must show as many (then they are Transformers' or torch's, reported as a warning)."""
    torch._dynamo.reset()
    model = copy.deepcopy(original)
    with compile_log() as base_log:
        for prompt in prompts:
            static_generate(model, prompt, device)
    base = base_log.counts()
    assert counts["graph_breaks"] <= base["graph_breaks"], (
        f"graph breaks: kernelized {counts['graph_breaks']}, original {base['graph_breaks']}:\n"
        + "\n\n".join(log.graph_breaks)
    )
    assert counts["cudagraph_skips"] <= base["cudagraph_skips"], (
        f"cudagraph skips: kernelized {counts['cudagraph_skips']}, original {base['cudagraph_skips']}:\n"
        + "\n\n".join(log.cudagraph_skips)
    )
    extra = sorted(set(log.cudagraph_skips) - set(base_log.cudagraph_skips))
    assert not extra, "cudagraph skips the original does not have:\n" + "\n\n".join(extra)
    if device == "cuda":  # on CPU inductor is not involved: nothing to report
        warnings.warn(
            f"the original model too: {base['graph_breaks']} graph breaks, {base['cudagraph_skips']} "
            "cudagraph skips (Transformers' or torch's, not geglu's)"
        )


def test_compile_log_sees_graph_breaks_and_names_their_code():
    """The log capture the test relies on: a graph break is recorded, with the user
    code's location (what `mentioning` reads)."""

    def f(x):
        x = x * 2
        torch._dynamo.graph_break()
        return x + 1

    torch._dynamo.reset()
    with compile_log() as log:
        torch.compile(f, backend="eager")(torch.randn(4))
    assert log.counts()["graph_breaks"] >= 1
    assert mentioning(log.graph_breaks, [__file__]), log.messages


def test_compile_log_attributes_a_break_in_our_layer_to_geglu(kernel, monkeypatch):
    """The markers work: a graph break planted inside geglu's GeGLUMLP forward is
    reported with the layer's frame, which `geglu_markers` recognizes."""
    from transformers import GemmaConfig
    from transformers.models.gemma.modeling_gemma import GemmaMLP

    import types

    # Every module-level function of layers that GeGLUMLP.forward calls gets a graph
    # break in front (whatever the layer's internals are named today).
    names = [
        n
        for n in kernel.layers.GeGLUMLP.forward.__code__.co_names
        if isinstance(getattr(kernel.layers, n, None), types.FunctionType)
    ]
    assert names, "GeGLUMLP.forward calls no function of layers"

    def breaking(real):
        def wrapper(*args, **kwargs):
            torch._dynamo.graph_break()
            return real(*args, **kwargs)

        return wrapper

    for n in names:
        monkeypatch.setattr(kernel.layers, n, breaking(getattr(kernel.layers, n)))
    device = "cuda" if torch.cuda.is_available() else "cpu"  # the device `kernel` serves
    mlp = GemmaMLP(GemmaConfig(hidden_size=64, intermediate_size=128)).to(device).eval()
    x = torch.randn(3, 64, device=device)
    torch._dynamo.reset()
    with compile_log() as log, torch.no_grad():
        torch.compile(lambda x: kernel.layers.GeGLUMLP.forward(mlp, x), backend="eager")(x)
    assert mentioning(log.graph_breaks, geglu_markers(kernel)), log.messages
    torch._dynamo.reset()
