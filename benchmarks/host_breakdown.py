"""Where the host time of one GeGLU MLP layer call goes, level by level.

host_time.py measures a whole layer call; this peels it: the kernelized layer, the
functional entry it calls (`mlp_layer_entry`), the native op through its overload
packet and through `.default`, and the pieces inside the op (the engine's gate/up
launch, cuBLAS's down GEMM, an allocation) next to floors (a view, an empty op call
through the dispatcher). Each row is the median host time per call, in bursts with
no sync (the GPU stays behind), over interleaved rounds. Then torch.profiler's
self-CPU table of the layer call names the ATen calls inside it.

    python benchmarks/host_breakdown.py                      # GPU, Gemma-2B sizes, M = 1
    python benchmarks/host_breakdown.py --device cpu --tiny  # smoke test of the script
    python benchmarks/host_breakdown.py --python-from DIR    # + the layer with DIR's
        layers.py / linear.py (another revision's Python) over the same native build
"""

import argparse
import copy
import os
import statistics
import sys
import types
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import example  # noqa: E402
from host_time import add_call_args, host_us  # noqa: E402  (its timing loop and options)


def _layer_with_python_from(directory: Path, package: str, eager):
    """A copy of `eager` whose forward is GeGLUMLP's from directory/layers.py, importing
    directory/linear.py, both run as modules of the loaded build's package (its native
    op, its other modules): an A/B of Python alone, in one process."""
    def load(name, text):
        module = types.ModuleType(f"{package}.{name}")
        module.__package__ = package
        sys.modules[module.__name__] = module
        exec(compile(text, str(directory / name), "exec"), module.__dict__)
        return module

    def source(name):
        return (directory / f"{name}.py").read_text().replace("from .linear import", "from .linear_other import")

    load("linear_other", source("linear"))
    layers = load("layers_other", source("layers"))
    other = copy.deepcopy(eager)
    other.forward = layers.GeGLUMLP.forward.__get__(other)
    return other


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_call_args(ap, calls=400)
    ap.add_argument("--python-from", type=Path, help="a directory holding another revision's layers.py and "
                    "linear.py: row 'layer, DIR's Python' runs them over this build's native op")
    args = ap.parse_args(argv)

    from transformers import GemmaConfig
    from transformers.models.gemma.modeling_gemma import GemmaMLP

    dim, hidden = (64, 256) if args.tiny else (2048, 16384)
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    torch.manual_seed(0)
    with torch.device(args.device):
        eager = GemmaMLP(GemmaConfig(hidden_size=dim, intermediate_size=hidden, hidden_act="gelu_pytorch_tanh"))
        eager = eager.to(dtype).eval()
        x = torch.randn(1, args.tokens, dim, dtype=dtype)
    layer = example.kernelize_with_geglu(copy.deepcopy(eager), layer=example.local_layer)
    # The geglu package kernelize loaded (its module name carries a build hash).
    linear = next(m for name, m in list(sys.modules.items()) if name.endswith(".linear") and hasattr(m, "_native_call"))
    ops = linear.ops

    wg, wu, wd = (m.weight for m in (eager.gate_proj, eager.up_proj, eager.down_proj))
    x2 = x.view(-1, dim)
    h = torch.randn(args.tokens, hidden, dtype=dtype, device=args.device)
    wdt = wd.t()
    mlp_args = (x, wg, wu, wd, None, None, None, None, "tanh")
    rows = {
        "eager GemmaMLP": lambda: eager(x),
        "layer (kernelized GemmaMLP)": lambda: layer(x),
        "mlp_layer_entry": lambda: linear.mlp_layer_entry(*mlp_args),
        "ops._geglu_mlp (packet)": lambda: ops._geglu_mlp(*mlp_args),
        "ops._geglu_mlp.default": lambda: ops._geglu_mlp.default(*mlp_args),
        "ops._geglu_mlp.default, 2-d x": lambda: ops._geglu_mlp.default(x2, *mlp_args[1:]),
        "down: torch.mm(h, wd.t())": lambda: torch.mm(h, wd.t()),
        "down: torch.mm(h, wdt), wdt = wd.t() kept": lambda: torch.mm(h, wdt),
        "F.linear(x, wg)": lambda: torch.nn.functional.linear(x, wg),
        "torch.empty([M, hidden])": lambda: torch.empty((args.tokens, hidden), dtype=dtype, device=args.device),
        "x.view(-1, dim)": lambda: x.view(-1, dim),
    }
    if args.python_from is not None:
        other = _layer_with_python_from(args.python_from, linear.__name__.rsplit(".", 1)[0], eager)
        rows[f"layer, {args.python_from.name}'s Python"] = lambda: other(x)
    # Floors: a stable-ABI op's dispatcher call with no work, and the op's builtin
    # without OpOverload.__call__'s Python frame.
    empty = torch.empty(0, dtype=dtype, device=args.device)
    rows["ops.gelu.default(empty, empty)"] = lambda: ops.gelu.default(empty, empty)
    rows["ops._geglu_mlp.default._op"] = lambda: ops._geglu_mlp.default._op(*mlp_args)
    if hasattr(ops, "_geglu_linear") and args.device == "cuda":
        rows["gate/up: ops._geglu_linear.default"] = lambda: ops._geglu_linear.default(
            x2, wg, wu, None, None, "tanh"
        )
    if args.device == "cuda":
        def mm_lt():
            torch.backends.cuda.preferred_blas_library("cublaslt")
            try:
                return torch.mm(h, wdt)
            finally:
                torch.backends.cuda.preferred_blas_library("default")

        rows["down: torch.mm(h, wdt) on cublasLt (+2 setter calls)"] = mm_lt
        rows["2 preferred_blas_library setter calls"] = lambda: (
            torch.backends.cuda.preferred_blas_library("default"),
            torch.backends.cuda.preferred_blas_library("default"),
        )
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    samples = {k: [] for k in rows}
    with torch.inference_mode():
        ref = eager(x).float()
        for candidate in [layer] + ([other] if args.python_from is not None else []):
            err = (candidate(x).float() - ref).abs().max().item()
            assert err <= 0.05 * ref.abs().max().item() + 1e-3, err
        for fn in rows.values():  # warm up
            for _ in range(5):
                fn()
        for _ in range(args.rounds):
            for k, fn in rows.items():
                samples[k].append(host_us(fn, args.device, args.calls))

        acts = [torch.profiler.ProfilerActivity.CPU]
        with torch.profiler.profile(activities=acts) as prof:
            for _ in range(100):
                layer(x)
        sync()

    device = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(f"\n== host time per call ({device}, torch {torch.__version__}, M = {args.tokens}, "
          f"{dim} -> {hidden} -> {dim}, median of {args.rounds} rounds x {args.calls} calls)")
    print(f"{'call':42} {'us':>7} {'spread':>13}")
    for k, s in samples.items():
        print(f"{k:42} {statistics.median(s):7.1f} {min(s):6.1f}-{max(s):<6.1f}")
    print("\n== torch.profiler, 100 layer calls (profiler overhead included)")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20))
    if os.environ.get("OUT"):
        prof.export_chrome_trace(str(Path(os.environ["OUT"], "host_breakdown_trace.json")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
