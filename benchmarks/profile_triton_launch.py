"""Where the host time of one small Triton activation call goes (decode shape).

    python benchmarks/profile_triton_launch.py

A diagnostic, not a benchmark: cProfile over 300 calls of the Triton custom op at
[16, 24576] bf16, printing the top entries by cumulative time, and the same through
the public `geglu` (native op) for comparison.
"""

import cProfile
import os
import pstats
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent


def per_call_us(fn, n=300) -> float:
    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e6


def main() -> None:
    os.environ.setdefault("LOCAL_KERNELS", f"org/geglu={REPO}")
    from kernels import get_kernel

    k = get_kernel("org/geglu", version=1)
    g, u = (torch.randn(16, 24576, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    out = torch.empty_like(g)
    calls = {
        "ops._geglu_triton": lambda: k._ops.ops._geglu_triton(g, u, "tanh"),
        "triton_kernels.activation.geglu_forward": lambda: k.triton_kernels.activation.geglu_forward(out, g, u, "tanh"),
        "ops.geglu (native)": lambda: k._ops.ops.geglu(g, u, "tanh"),
        "geglu (public)": lambda: k.geglu(g, u),
    }
    for name, fn in calls.items():
        print(f"{name:36s} {per_call_us(fn):8.1f} us/call (host-bound loop)")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(300):
        k._ops.ops._geglu_triton(g, u, "tanh")
    torch.cuda.synchronize()
    prof.disable()
    pstats.Stats(prof).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
