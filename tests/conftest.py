"""Tests load geglu only the way users do: through `kernels`, never `import geglu`.

Grouped by what they prove: kernels/ (each kernel against a float64 reference),
api/ (the public functions, routes and layers), integration/ (builds, variants,
Transformers), release/ (the release tooling). `pytest -m quick` runs kernels/ and
api/ (about a minute on a CPU, the loop to iterate in); CI runs everything.

`python -m tools.build` must have produced build/<variant>/ first (the README's test
command does). LOCAL_KERNELS maps the Hub repo id to this checkout, as
kernel-builder's test shells do.
"""

import inspect
import os
from pathlib import Path

import pytest
import torch

# Without a GPU, Triton kernels run in its interpreter. The flag must be set before
# anything imports triton (its library functions are wrapped at import).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

REPO = Path(__file__).resolve().parent.parent
REPO_ID = "org/geglu"

HAS_CUDA = torch.cuda.is_available()
DEVICES = ["cpu"] + (["cuda"] if HAS_CUDA else [])


def pytest_configure(config):
    config.addinivalue_line("markers", "cuda: needs a CUDA GPU (skipped, and reported as skipped, on CPU)")
    config.addinivalue_line("markers", "slow: long-running")
    config.addinivalue_line(
        "markers", "profiler: reads kernel names from torch.profiler (CUPTI cannot attach beside compute-sanitizer)"
    )
    config.addinivalue_line("markers", "quick: the kernels/ and api/ tests not marked slow (set by conftest)")


QUICK_GROUPS = ("kernels", "api")


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords and not HAS_CUDA:
            item.add_marker(skip)
        if item.path.parent.name in QUICK_GROUPS and "slow" not in item.keywords:
            item.add_marker(pytest.mark.quick)


def _load(backend=None):
    from kernels import get_kernel

    rev = os.environ.get("GEGLU_HUB_REVISION")
    if rev:  # .github/workflows/gpu-tests.yml: test the build uploaded to the Hub
        repo = os.environ.get("GEGLU_HUB_REPO", REPO_ID)
        os.environ.pop("LOCAL_KERNELS", None)
        return get_kernel(repo, revision=rev, backend=backend, trust_remote_code=[repo])
    if not (REPO / "build").is_dir():
        raise RuntimeError("build/ is missing: run `python -m tools.build` first")
    os.environ["LOCAL_KERNELS"] = f"{REPO_ID}={REPO}"
    return get_kernel(REPO_ID, version=1, backend=backend)


@pytest.fixture(scope="session")
def kernel():
    """The variant `kernels` picks for this torch (compiled CUDA on a GPU torch)."""
    return _load()


@pytest.fixture(scope="session")
def cpu_kernel():
    """The CPU variant (on a CUDA torch too), for CPU tensors."""
    return _load("cpu")


# float32 math everywhere, so the error against a float64 reference is the storage
# dtype's rounding of the result (half an ulp) plus a little float32 arithmetic.
STORAGE_TOLERANCE = {
    torch.float32: dict(rtol=2e-5, atol=2e-5),
    torch.bfloat16: dict(rtol=1.6e-2, atol=1e-3),
    torch.float16: dict(rtol=2e-3, atol=1e-4),
}


# (rtol, atol) of the activation ops against a float64 reference: half an ulp of the
# storage type plus float32 math error (test_activation, test_triton_activation).
ACTIVATION_TOLERANCE = {
    torch.float32: (2e-5, 2e-5),
    torch.float16: (2e-3, 2e-4),
    torch.bfloat16: (1.6e-2, 2e-3),
}


def poisoned_like(t: torch.Tensor) -> torch.Tensor:
    """An output buffer full of NaN, so any element a kernel fails to write shows."""
    return torch.full_like(t, float("nan"))


def compiled_count(jit_fn) -> int:
    """How many compiled variants a Triton JIT function holds (recompile checks)."""
    caches = getattr(jit_fn, "device_caches", None)
    if caches is None:
        pytest.skip("this triton's JITFunction has no device_caches")
    return sum(len(entry[0]) for entry in caches.values())


def spy(monkeypatch, module, name):
    """Record the calls to functional op `name` of `module`, the package module that
    defines it and through which the layers call it (`kernel.linear`, say), each as its
    arguments by name."""
    calls = []
    real = getattr(module, name)
    signature = inspect.signature(real)

    def wrapper(*args, **kwargs):
        calls.append(signature.bind(*args, **kwargs).arguments)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapper)
    return calls


def inductor_graphs_backend(graphs: dict):
    """A torch.compile backend that hands a graph to AOT autograd as Inductor does (its
    decompositions, its min-cut partitioner: what is saved and what is recomputed) and
    records what Inductor would receive, without generating code (the graphs run as
    they are): per compiled graph, under "forward" and "backward", a Counter of its
    ops; under "saved", a Counter of (shape, dtype) of the tensors the forward keeps for
    the backward (the backward's inputs other than its incoming gradients)."""
    from collections import Counter

    from functorch.compile import make_boxed_func, min_cut_rematerialization_partition
    from torch._dynamo.backends.common import aot_autograd
    from torch._inductor.decomposition import select_decomp_table

    def record(kind):
        def compile_graph(gm, example_inputs):
            nodes = list(gm.graph.nodes)
            graphs.setdefault(kind, []).append(Counter(str(n.target) for n in nodes if n.op == "call_function"))
            if kind == "backward":
                vals = [n.meta.get("val") for n in nodes if n.op == "placeholder" and not n.name.startswith("tangents")]
                graphs.setdefault("saved", []).append(
                    Counter((tuple(v.shape), v.dtype) for v in vals if isinstance(v, torch.Tensor))
                )
            return make_boxed_func(gm.forward)

        return compile_graph

    return aot_autograd(
        fw_compiler=record("forward"),
        bw_compiler=record("backward"),
        partition_fn=min_cut_rematerialization_partition,
        decompositions=select_decomp_table(),
    )
