"""CPU benchmark: the compiled geglu ops against what a user would write in eager PyTorch.

    python -m tools.build && python benchmarks/bench_cpu.py [--rounds 15] [--shape 4096 3072]
        [--baseline OTHER_CHECKOUT]

Loads the CPU variant the way users do (kernels.get_kernel, with LOCAL_KERNELS pointing
at this checkout), times each side with time.perf_counter, every side once per round in
a shuffled order so that all see the same machine noise, and reports medians with the spread
(25th-75th percentile) of every side. Every timed call allocates its result, as the
eager code does. `--baseline` also times another checkout's build (say a worktree of
the previous commit, built there) in the same rounds.

Each row also reports the bytes the op must move (its inputs read once, its outputs
written once) per second of its median, next to the same machine's copy bandwidth
measured in the same way: `dst.copy_(src)` into a preallocated tensor, and `src.clone()`
(a fresh result, as the ops write). A row near those is bandwidth-bound. Writes
benchmarks/results/cpu_<date>.json with the machine description.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
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


def load_baseline_ops(checkout: Path):
    from kernels import get_local_kernel

    kernel = get_local_kernel(checkout / "build", backend="cpu")
    return kernel, kernel._ops.ops


def time_sides(fns, rounds: int, warmup: int = 3) -> list[list[float]]:
    """Seconds per call for each function, all measured in every round, in an order
    shuffled per round (seeded): a call's cost depends on what the one before it freed
    (glibc returns a freed heap top to the OS and the next call faults its pages in
    again), so no side may always follow the same other side."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    times = [[] for _ in fns]
    for r in range(rounds):
        order = list(range(len(fns)))
        random.Random(r).shuffle(order)
        for i in order:
            start = time.perf_counter()
            fns[i]()
            times[i].append(time.perf_counter() - start)
    return times


def quartiles_ms(t: list[float]) -> tuple[float, float, float]:
    """25th, 50th and 75th percentile in ms."""
    q1, q2, q3 = statistics.quantiles(t, n=4, method="inclusive")
    return q1 * 1e3, q2 * 1e3, q3 * 1e3


def copy_bandwidth(shape, rounds: int) -> dict:
    """GB/s of a float32 copy of `shape` (read + write bytes over the median time):
    into a preallocated tensor, and into a fresh one (clone, which pays for the new
    pages as the ops' fresh results do)."""
    src = torch.randn(shape)
    dst = torch.empty_like(src)
    t_copy, t_clone = time_sides([lambda: dst.copy_(src), src.clone], rounds)
    moved = 2 * src.numel() * src.element_size()
    out = {"bytes": moved}
    for name, t in (("copy_", t_copy), ("clone", t_clone)):
        q1, q2, q3 = quartiles_ms(t)
        out[name] = {"ms_median": q2, "ms_q1": q1, "ms_q3": q3, "gb_per_s": moved / q2 / 1e6}
    return out


def cases(ops_list, shape, dtype):
    """(name, approximate, bytes moved, eager fn, [fn per ops]) for one dtype."""
    g = torch.randn(shape, dtype=dtype)
    u = torch.randn(shape, dtype=dtype)
    dy = torch.randn(shape, dtype=dtype)
    x = torch.cat([g, u], dim=-1)  # merged [..., 2d], gate first
    d = shape[-1]
    tensor_bytes = g.numel() * g.element_size()

    def eager_backward(approximate):
        # What autograd runs for F.gelu(g) * u.
        grad_gate = torch.ops.aten.gelu_backward(dy * u, g, approximate=approximate)
        grad_up = dy * F.gelu(g, approximate=approximate)
        return grad_gate, grad_up

    for approximate in ("tanh", "none"):
        gelu_name = "gelu_tanh" if approximate == "tanh" else "gelu"
        merged_name = "gelu_tanh_and_mul" if approximate == "tanh" else "gelu_and_mul"
        yield (
            "geglu",
            approximate,
            3 * tensor_bytes,
            lambda a=approximate: F.gelu(g, approximate=a) * u,
            [lambda a=approximate, ops=ops: ops.geglu(g, u, a) for ops in ops_list],
        )
        yield (
            f"merged ({merged_name})",
            approximate,
            3 * tensor_bytes,
            lambda a=approximate: F.gelu(x[..., :d], approximate=a) * x[..., d:],
            [
                lambda ops=ops, m=merged_name: getattr(ops, m)(torch.empty(shape, dtype=dtype), x)
                for ops in ops_list
            ],
        )
        yield (
            "geglu_backward",
            approximate,
            5 * tensor_bytes,
            lambda a=approximate: eager_backward(a),
            [lambda a=approximate, ops=ops: ops.geglu_backward(dy, g, u, a) for ops in ops_list],
        )
        yield (
            gelu_name,
            approximate,
            2 * tensor_bytes,
            lambda a=approximate: F.gelu(g, approximate=a),
            [lambda ops=ops, m=gelu_name: getattr(ops, m)(torch.empty_like(g), g) for ops in ops_list],
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", type=int, nargs=2, default=[4096, 3072], metavar=("TOKENS", "HIDDEN"))
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="another checkout whose build/ to time in the same rounds (e.g. the previous commit)")
    ap.add_argument("--out", type=Path, default=None, help="JSON path (default: benchmarks/results/cpu_<date>.json)")
    args = ap.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    kernel, ops = load_cpu_ops()
    ops_list = [ops]
    baseline = None
    if args.baseline:
        baseline, baseline_ops = load_baseline_ops(args.baseline.resolve())
        ops_list.append(baseline_ops)
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
          f"({machine['torch_threads']} threads, {machine['torch_cpu_capability']}); kernel {kernel.__name__}"
          + (f"; baseline {baseline.__name__} ({args.baseline})" if baseline else ""))
    print(f"# load average {machine['load_average_at_start']}")
    bandwidth = copy_bandwidth(shape, args.rounds)
    print(f"# float32 copy of {list(shape)}: copy_ {bandwidth['copy_']['gb_per_s']:.2f} GB/s, "
          f"clone (fresh result) {bandwidth['clone']['gb_per_s']:.2f} GB/s (read + write bytes / median)")
    print(f"# shape {list(shape)}, {args.rounds} rounds (sides in a shuffled order): median ms per call [25th-75th")
    print("# percentile], speedup of the medians and of the fastest rounds; GB/s: bytes the op must")
    print("# move (inputs + outputs once) over our median")
    header = (
        f"{'op':<28} {'approx':<6} {'dtype':<9} {'eager':>22} {'geglu':>22} {'speedup':>8} {'(fastest)':>10}"
        f" {'GB/s':>6}" + (f" {'baseline':>22} {'vs base':>8}" if baseline else "")
    )
    print(header)
    print("-" * len(header))

    def cell(q):
        return f"{q[1]:.1f} [{q[0]:.1f}-{q[2]:.1f}]"

    results = []
    for dtype_name in args.dtypes:
        dtype = getattr(torch, dtype_name)
        for name, approximate, moved, eager, ours_fns in cases(ops_list, shape, dtype):
            times = time_sides([eager, *ours_fns], args.rounds)
            t_eager, t_ours = times[0], times[1]
            q_eager, q_ours = quartiles_ms(t_eager), quartiles_ms(t_ours)
            speedup = q_eager[1] / q_ours[1]
            speedup_min = min(t_eager) / min(t_ours)
            gbps = moved / q_ours[1] / 1e6
            line = (
                f"{name:<28} {approximate:<6} {dtype_name:<9} {cell(q_eager):>22} {cell(q_ours):>22} "
                f"{speedup:>7.2f}x {speedup_min:>9.2f}x {gbps:>6.2f}"
            )
            row = {
                "op": name,
                "approximate": approximate,
                "dtype": dtype_name,
                "shape": list(shape),
                "eager_ms_median": q_eager[1],
                "geglu_ms_median": q_ours[1],
                "eager_ms_q1_q3": [q_eager[0], q_eager[2]],
                "geglu_ms_q1_q3": [q_ours[0], q_ours[2]],
                "eager_ms_min": min(t_eager) * 1e3,
                "geglu_ms_min": min(t_ours) * 1e3,
                "speedup_median": speedup,
                "speedup_min": speedup_min,
                "bytes_moved": moved,
                "geglu_gb_per_s": gbps,
                "rounds": args.rounds,
            }
            if baseline:
                q_base = quartiles_ms(times[2])
                line += f" {cell(q_base):>22} {q_base[1] / q_ours[1]:>7.2f}x"
                row.update(
                    baseline_ms_median=q_base[1],
                    baseline_ms_q1_q3=[q_base[0], q_base[2]],
                    baseline_ms_min=min(times[2]) * 1e3,
                    baseline_speedup_median=q_eager[1] / q_base[1],
                    speedup_over_baseline=q_base[1] / q_ours[1],
                )
            print(line, flush=True)
            results.append(row)

    now = datetime.datetime.now()
    out = args.out or REPO / "benchmarks" / "results" / f"cpu_{now:%Y-%m-%d}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "benchmark": "benchmarks/bench_cpu.py",
        "date": now.isoformat(timespec="seconds"),
        "load_average_at_end": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "machine": machine,
        "kernel_module": kernel.__name__,
        "baseline_module": baseline.__name__ if baseline else None,
        "baseline_checkout": str(args.baseline) if baseline else None,
        "eager": "F.gelu(gate, approximate=...) * up; merged: eager on x[..., :d], x[..., d:]; "
        "backward: aten.gelu_backward(dy * up, gate) and dy * gelu(gate); gelu: F.gelu(x)",
        "copy_bandwidth": bandwidth,
        "results": results,
    }
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {out.relative_to(REPO) if out.is_relative_to(REPO) else out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
