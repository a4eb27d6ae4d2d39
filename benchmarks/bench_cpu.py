"""CPU benchmark: the compiled geglu ops against what a user would write in eager PyTorch.

    python -m tools.build && python benchmarks/bench_cpu.py [--rounds 15] [--shape 4096 3072]

Loads the CPU variant the way users do (kernels.get_kernel, with LOCAL_KERNELS pointing
at this checkout), times each pair with time.perf_counter, alternating the two sides
round by round so that both see the same machine noise, and reports medians. Every
timed call allocates its result, as the eager code does. Writes
benchmarks/results/cpu_<date>.json with the machine description.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parent.parent
REPO_ID = "org/geglu"


def load_cpu_ops():
    from kernels import get_kernel

    os.environ["LOCAL_KERNELS"] = f"{REPO_ID}={REPO}"
    kernel = get_kernel(REPO_ID, version=1, backend="cpu")
    return kernel, kernel._ops.ops


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def time_pair(eager, ours, rounds: int, warmup: int = 3) -> tuple[list[float], list[float]]:
    """Seconds per call for each side, measured alternately."""
    for _ in range(warmup):
        eager()
        ours()
    t_eager, t_ours = [], []
    for _ in range(rounds):
        for fn, times in ((eager, t_eager), (ours, t_ours)):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    return t_eager, t_ours


def cases(ops, shape, dtype):
    """(name, approximate, eager fn, ours fn) for one dtype."""
    g = torch.randn(shape, dtype=dtype)
    u = torch.randn(shape, dtype=dtype)
    dy = torch.randn(shape, dtype=dtype)
    x = torch.cat([g, u], dim=-1)  # merged [..., 2d], gate first
    d = shape[-1]
    merged_op = {"tanh": ops.gelu_tanh_and_mul, "none": ops.gelu_and_mul}

    def eager_backward(approximate):
        # What autograd runs for F.gelu(g) * u.
        grad_gate = torch.ops.aten.gelu_backward(dy * u, g, approximate=approximate)
        grad_up = dy * F.gelu(g, approximate=approximate)
        return grad_gate, grad_up

    for approximate in ("tanh", "none"):
        yield (
            "geglu",
            approximate,
            lambda a=approximate: F.gelu(g, approximate=a) * u,
            lambda a=approximate: ops.geglu(g, u, a),
        )
        yield (
            "merged (gelu_tanh_and_mul)" if approximate == "tanh" else "merged (gelu_and_mul)",
            approximate,
            lambda a=approximate: F.gelu(x[..., :d], approximate=a) * x[..., d:],
            lambda a=approximate: merged_op[a](torch.empty(shape, dtype=dtype), x),
        )
        yield (
            "geglu_backward",
            approximate,
            lambda a=approximate: eager_backward(a),
            lambda a=approximate: ops.geglu_backward(dy, g, u, a),
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", type=int, nargs=2, default=[4096, 3072], metavar=("TOKENS", "HIDDEN"))
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    ap.add_argument("--out", type=Path, default=None, help="JSON path (default: benchmarks/results/cpu_<date>.json)")
    args = ap.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    kernel, ops = load_cpu_ops()
    shape = tuple(args.shape)
    machine = {
        "cpu_model": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch_version": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average_at_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }
    print(f"# {machine['cpu_model']}, {machine['logical_cpus']} CPUs, torch {torch.__version__} "
          f"({machine['torch_threads']} threads, {machine['torch_cpu_capability']}); kernel {kernel.__name__}")
    print(f"# shape {list(shape)}, {args.rounds} alternating rounds: median ms per call, speedup of the")
    print("# medians and of the fastest rounds (less sensitive to other load on the machine)")
    header = (
        f"{'op':<28} {'approx':<6} {'dtype':<9} {'eager':>9} {'geglu':>9} {'speedup':>8} {'(fastest)':>10}"
    )
    print(header)
    print("-" * len(header))

    results = []
    for dtype_name in args.dtypes:
        dtype = getattr(torch, dtype_name)
        for name, approximate, eager, ours in cases(ops, shape, dtype):
            t_eager, t_ours = time_pair(eager, ours, args.rounds)
            eager_ms = statistics.median(t_eager) * 1e3
            ours_ms = statistics.median(t_ours) * 1e3
            speedup = eager_ms / ours_ms
            speedup_min = min(t_eager) / min(t_ours)
            print(
                f"{name:<28} {approximate:<6} {dtype_name:<9} {eager_ms:>9.2f} {ours_ms:>9.2f} "
                f"{speedup:>7.2f}x {speedup_min:>9.2f}x"
            )
            results.append(
                {
                    "op": name,
                    "approximate": approximate,
                    "dtype": dtype_name,
                    "shape": list(shape),
                    "eager_ms_median": eager_ms,
                    "geglu_ms_median": ours_ms,
                    "eager_ms_min": min(t_eager) * 1e3,
                    "geglu_ms_min": min(t_ours) * 1e3,
                    "speedup_median": speedup,
                    "speedup_min": speedup_min,
                    "rounds": args.rounds,
                }
            )

    now = datetime.datetime.now()
    out = args.out or REPO / "benchmarks" / "results" / f"cpu_{now:%Y-%m-%d}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "benchmark": "benchmarks/bench_cpu.py",
        "date": now.isoformat(timespec="seconds"),
        "load_average_at_end": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "machine": machine,
        "kernel_module": kernel.__name__,
        "eager": "F.gelu(gate, approximate=...) * up; merged: eager on x[..., :d], x[..., d:]; "
        "backward: aten.gelu_backward(dy * up, gate) and dy * gelu(gate)",
        "results": results,
    }
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {out.relative_to(REPO) if out.is_relative_to(REPO) else out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
