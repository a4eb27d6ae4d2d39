"""The MLP ladder of "Profiling in PyTorch (Part 2): From nn.Linear to a Fused MLP", one
rung further: the post's SimpleGeGLUMLP (dim 768, hidden 3072, batch 64 x seq 128, bf16,
tanh GELU) run eager, through torch.compile, Liger's LigerGEGLUMLP, and this package
(geglu_mlp through kernels.get_kernel, and the module kernelized with its GeGLUMLP
layer), each under torch.profiler with the post's schedule (wait=1, warmup=1, active=3),
after a warm-up that keeps compiles out of the trace.

    python -m tools.build && python benchmarks/profile_mlp_ladder.py \\
        --json ladder.json --trace-dir traces --plot ladder.png [--without-sm90]
    python benchmarks/profile_mlp_ladder.py --device cpu --tokens 256 --dtype float32

Per rung it prints the kernels of one forward (name, time, launches; on CPU, where there
is no GPU lane, the forward's outermost compute ops), the dispatcher ops the host makes
per forward (aten:: / the package's / other), and the forward's time: its kernels' time
from the profile and its median wall time outside the profiler. The post counts 5
kernels eager, 4 compiled, 4 with Liger; the package's MLP on an H100 / H200 should run
2 (its routes in geglu_kernels/cuda/fused_gemm_router.cpp; the profile is what says).

--json writes a summary (device, versions, date, shape, per rung the kernels per
forward, op counts, times, and the one traced forward's lane); --trace-dir one Chrome
trace of a single forward per rung (open in https://ui.perfetto.dev); --plot a PNG of
those lanes stacked (needs matplotlib; without it the plot is skipped with a note).
--without-sm90 adds the routes a GPU without the Hopper engine runs (mlp_ladder.py's
sm90_off_rungs: the native op has no switch, see there).
"""

import argparse
import datetime
import json
import os
import platform
import re
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from forward_profile import POST_SCHEDULE, profile_forward  # noqa: E402
from plot_kernel_lanes import plot_lanes, rows_from_summary, short_kernel_name  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
RUNG_NAMES = ("eager", "torch.compile", "liger", "geglu_mlp", "kernelized")
# What --without-sm90 can and cannot switch off (mlp_ladder.sm90_off_rungs has the detail).
SM90_OFF_NOTE = (
    "no switch reaches the native op's choice of the sm_90 engine (C++ is_sm90() in "
    "geglu_kernels/cuda/fused_gemm_router.cpp): the geglu_mlp and kernelized rungs keep it; the 'no sm90' "
    "rungs run the kernels of the routes without it by other calls"
)
# Relative error a rung may have against eager: half-precision GEMMs round each
# product's sum, and the fused kernels round at other points; float32 agrees closely.
TOLERANCE = {torch.float32: 1e-3, torch.bfloat16: 3e-2, torch.float16: 3e-2}


def load_kernel(device: str):
    """The package the way users load it: kernels.get_kernel, this checkout's build/
    (LOCAL_KERNELS, unless the environment already points it elsewhere); the CPU
    variant for CPU tensors also under a CUDA torch."""
    from kernels import get_kernel

    os.environ.setdefault("LOCAL_KERNELS", f"org/geglu={REPO}")
    return get_kernel("org/geglu", version=1, backend="cpu" if device == "cpu" else None)


def device_description(device: str) -> dict:
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        return {"device": props.name, "capability": f"{props.major}.{props.minor}"}
    name = platform.processor() or platform.machine()
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
        name = re.search(r"model name\s*:\s*(.+)", cpuinfo).group(1).strip()
    except (OSError, AttributeError):
        pass
    return {"device": name, "threads": torch.get_num_threads()}


def versions() -> dict:
    """torch, Python, and the installed versions of kernels, triton and liger-kernel
    (None where one is not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {"torch": torch.__version__, "python": platform.python_version()}
    for dist in ("kernels", "triton", "liger-kernel"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = None
    return out


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=("cuda", "cpu"))
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--tokens", type=int, help="x as [tokens, dim] instead of [batch, seq, dim]")
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--hidden", type=int, default=3072)
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    ap.add_argument("--rungs", default=",".join(RUNG_NAMES), help=f"comma-separated subset of {','.join(RUNG_NAMES)}")
    ap.add_argument("--without-sm90", action="store_true",
                    help="also run the geglu routes of a GPU without the sm_90 engine (mlp_ladder.sm90_off_rungs)")  # fmt: skip
    ap.add_argument("--reps", type=int, default=20, help="timed forwards per rung (median)")
    ap.add_argument("--json", type=Path, help="write the summary here")
    ap.add_argument("--trace-dir", type=Path, help="write one Chrome trace (one forward) per rung here")
    ap.add_argument("--plot", type=Path, help="write a PNG of each rung's lane of one forward")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    unknown = set(args.rungs.split(",")) - set(RUNG_NAMES)
    if unknown:
        ap.error(f"unknown rungs {sorted(unknown)}; choose from {RUNG_NAMES}")
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda, but torch sees no CUDA device")
    return args


def print_rung(rung, prof) -> None:
    lane = "GPU kernels" if prof.lane == "cuda" else "CPU compute ops (no GPU lane)"
    print(f"\n== {rung.name}: {rung.what}" + (f" [sm90 engine {rung.sm90_engine}]" if rung.sm90_engine != "n/a" else ""))
    memory = f" (+{prof.memory_ops_per_forward:g} memset/memcpy)" if prof.memory_ops_per_forward else ""
    print(f"   {lane} per forward: {prof.kernels_per_forward:g}{memory}, {prof.kernel_time_us:.1f} us; "
          f"forward {prof.forward_us:.1f} us wall (median, outside the profiler)")  # fmt: skip
    print(f"   {'launches':>8} {'us':>9}  name")
    for k in prof.kernels:
        print(f"   {k['launches']:>8g} {k['time_us']:>9.1f}  {short_kernel_name(k['name']):<22} {k['name'][:100]}")
    ops = prof.ops
    print(f"   dispatcher ops per forward: {ops['total']:g} (aten {ops['aten']:g}, geglu {ops['ours']:g}, "
          f"other {ops['other']:g})")  # fmt: skip


def print_table(results) -> None:
    print(f"\n{'rung':<30} {'kernels/fwd':>11} {'memsets':>7} {'ops/fwd':>8} {'aten':>5} {'ours':>5} {'kernel us':>10} {'wall us':>9}")
    for r in results:
        if r["status"] != "ran":
            print(f"{r['name']:<30} {r['status']}: {r['reason'][:90]}")
            continue
        print(f"{r['name']:<30} {r['kernels_per_forward']:>11g} {r['memory_ops_per_forward']:>7g} {r['ops']['total']:>8g} {r['ops']['aten']:>5g} "
              f"{r['ops']['ours']:>5g} {r['kernel_time_us']:>10.1f} {r['forward_us']:>9.1f}")  # fmt: skip


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from mlp_ladder import SimpleGeGLUMLP, ladder  # imports kernels; after argument errors

    device, dtype = args.device, getattr(torch, args.dtype)
    geglu = load_kernel(device)
    torch.manual_seed(args.seed)
    model = SimpleGeGLUMLP(args.dim, args.hidden).to(device=device, dtype=dtype).eval()
    shape = (args.tokens, args.dim) if args.tokens else (args.batch, args.seq, args.dim)
    x = torch.randn(shape, device=device, dtype=dtype)
    tokens = x.numel() // args.dim
    if args.trace_dir:
        args.trace_dir.mkdir(parents=True, exist_ok=True)

    summary = {
        **device_description(device),
        **versions(),
        "variant": Path(geglu.__file__).parent.name,
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "shape": {"x": list(shape), "tokens": tokens, "dim": args.dim, "hidden": args.hidden, "dtype": args.dtype},
        "schedule": POST_SCHEDULE,
        "rungs": [],
    }
    summary["title"] = (f"{summary['device']}: SimpleGeGLUMLP {tokens} tokens, {args.dim} -> {args.hidden}, "
                        f"{args.dtype}, one forward per rung")  # fmt: skip
    print(f"{summary['title']}\ntorch {torch.__version__}, kernels {summary['kernels']}, triton {summary['triton']}, "
          f"geglu variant {summary['variant']}")  # fmt: skip
    if args.without_sm90:
        summary["sm90_off"] = SM90_OFF_NOTE
        print(f"--without-sm90: {SM90_OFF_NOTE}")
        if device == "cpu":
            print("(on CPU there is no sm_90 engine: the fallback rung runs the CPU routes)")

    ok = True
    with torch.no_grad():
        reference = model(x)
        rungs = ladder(model, geglu, device, without_sm90=args.without_sm90, only=set(args.rungs.split(",")))
        for rung in rungs:
            entry = {"name": rung.name, "what": rung.what, "sm90_engine": rung.sm90_engine}
            if rung.skipped or rung.failed:
                status = "skipped" if rung.skipped else "failed"
                ok = ok and status == "skipped"
                print(f"\n== {rung.name}: {status.upper() if rung.failed else status}: {rung.skipped or rung.failed}")
                summary["rungs"].append({**entry, "status": status, "reason": rung.skipped or rung.failed})
                continue
            trace = args.trace_dir / f"{re.sub(r'[^A-Za-z0-9._-]+', '_', rung.name)}.json" if args.trace_dir else None
            try:
                err = rel_err(rung.forward(x), reference)
                prof = profile_forward(rung.forward, x, device, rung.op_namespaces, trace, reps=args.reps)
            except Exception as e:  # one broken rung (a Liger / Triton version mismatch) costs only itself
                ok = False
                print(f"\n== {rung.name}: FAILED: {e!r}")
                summary["rungs"].append({**entry, "status": "failed", "reason": repr(e)})
                continue
            print_rung(rung, prof)
            if err > TOLERANCE[dtype]:
                ok = False
                print(f"   MISMATCH: relative error {err:.2e} against eager (tolerance {TOLERANCE[dtype]:.0e})")
            summary["rungs"].append({**entry, "status": "ran", "rel_err_vs_eager": err, **prof.summary()})

    print_table(summary["rungs"])
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(summary, indent=1) + "\n")
        print(f"wrote {args.json}")
    if args.trace_dir:
        print(f"wrote {sum(r['status'] == 'ran' for r in summary['rungs'])} traces to {args.trace_dir}/")
    if args.plot:
        plot_lanes(rows_from_summary(summary), args.plot, summary["title"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
