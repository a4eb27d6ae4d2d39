"""Kernel-level profile of one GeGLU MLP training step (blog shape, bf16): ours vs eager.

    python benchmarks/profile_mlp_train.py

A diagnostic, not a benchmark: torch.profiler over a few steps, printing the CUDA
kernels by total time, so a slow step shows which kernel or copy costs what.
"""

import os
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    os.environ.setdefault("LOCAL_KERNELS", f"org/geglu={REPO}")
    from kernels import get_kernel

    geglu = get_kernel("org/geglu", version=1)
    m, d, h, dt = 8192, 768, 3072, torch.bfloat16
    x = torch.randn(m, d, device="cuda", dtype=dt, requires_grad=True)
    wg = (torch.randn(h, d, device="cuda", dtype=dt) * d**-0.5).requires_grad_()
    wu = (torch.randn(h, d, device="cuda", dtype=dt) * d**-0.5).requires_grad_()
    wd = (torch.randn(d, h, device="cuda", dtype=dt) * h**-0.5).requires_grad_()
    dy = torch.randn(m, d, device="cuda", dtype=dt)
    params = (x, wg, wu, wd)
    runs = {
        "eager": lambda: F.linear(F.gelu(F.linear(x, wg), approximate="tanh") * F.linear(x, wu), wd),
        "ours": lambda: geglu.geglu_mlp(x, wg, wu, wd),
        "ours forward only (no grad)": None,
    }
    for name, fn in runs.items():
        if fn is None:
            def step():
                with torch.no_grad():
                    geglu.geglu_mlp(x, wg, wu, wd)
        else:
            def step(fn=fn):
                torch.autograd.grad(fn(), params, dy)
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                step()
            torch.cuda.synchronize()
        print(f"\n=== {name}: 5 steps")
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=18, max_name_column_width=70))


if __name__ == "__main__":
    main()
