"""Where a GeGLU MLP training step (blog shape, bf16) spends its time: ours vs eager.

    python benchmarks/profile_mlp_train.py

A diagnostic, not a benchmark. Per variant: wall time per step (20 steps, synchronized
once), host time to issue one step (the GPU kept busy ahead of it), and from
torch.profiler the GPU kernel time per step, the kernel count, and the kernels by total
time. A step is host-bound when its wall time follows the issue time, not the kernel sum.
"""

import json
import os
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

REPO = Path(__file__).resolve().parent.parent


def kernel_gaps(prof):
    """(idle time before it, its duration, name) for every GPU kernel/memcpy/memset in
    the profile, in start order, from the exported chrome trace."""
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        events = json.load(open(f.name))["traceEvents"]
    gpu = sorted(
        (e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "dur" in e),
        key=lambda e: e["ts"],
    )
    out, end = [], None
    for e in gpu:
        out.append((0.0 if end is None else max(0.0, e["ts"] - end), e["dur"], e["name"]))
        end = max(end or 0.0, e["ts"] + e["dur"])
    return out


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

    def eager():
        return F.linear(F.gelu(F.linear(x, wg), approximate="tanh") * F.linear(x, wu), wd)

    def ours():
        return geglu.geglu_mlp(x, wg, wu, wd)

    def ours_composed():  # what variants without the compiled training op run
        return F.linear(geglu.geglu(F.linear(x, wg), F.linear(x, wu), "tanh"), wd)

    variants = {"eager": eager, "ours": ours, "ours_composed": ours_composed}
    rows = []
    for name, fn in variants.items():

        def step():
            torch.autograd.grad(fn(), params, dy)

        for _ in range(5):
            step()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(20):
            step()
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) / 20 * 1e6
        # Issue time: keep the GPU busy with a long sleep so the host never waits on it.
        issue = []
        for _ in range(10):
            torch.cuda._sleep(50_000_000)
            t0 = time.perf_counter()
            step()
            issue.append((time.perf_counter() - t0) * 1e6)
            torch.cuda.synchronize()
        issue_us = sorted(issue)[len(issue) // 2]
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                step()
            torch.cuda.synchronize()
        kernels = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
        gpu_us = sum(e.self_device_time_total for e in kernels) / 5
        count = sum(e.count for e in kernels) / 5
        rows.append((name, wall, issue_us, gpu_us, count))
        print(f"\n=== {name}: wall {wall:.1f} us/step, host issue {issue_us:.1f} us/step, "
              f"GPU kernels {gpu_us:.1f} us/step in {count:.0f} kernels")  # fmt: skip
        for e in sorted(kernels, key=lambda e: -e.self_device_time_total)[:14]:
            print(f"  {e.self_device_time_total / 5:8.1f} us  x{e.count / 5:<4.0f} {e.key[:100]}")
        print("  host (self CPU time per step, top ops):")
        host_ops = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
        for e in sorted(host_ops, key=lambda e: -e.self_cpu_time_total)[:12]:
            print(f"  {e.self_cpu_time_total / 5:8.1f} us  x{e.count / 5:<4.0f} {e.key[:100]}")
        print("  GPU idle before each kernel of the last profiled step (us), in launch order:")
        for gap, dur, kname in kernel_gaps(prof)[-int(count):]:
            print(f"  gap {gap:7.1f}  run {dur:7.1f}  {kname[:80]}")
    print(f"\n{'variant':<18} {'wall us':>9} {'issue us':>9} {'GPU us':>9} {'kernels':>8}")
    for name, wall, issue_us, gpu_us, count in rows:
        print(f"{name:<18} {wall:>9.1f} {issue_us:>9.1f} {gpu_us:>9.1f} {count:>8.0f}")


if __name__ == "__main__":
    main()
