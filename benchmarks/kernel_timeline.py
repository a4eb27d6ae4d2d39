"""Each kernel of one Gemma MLP layer call, replayed from a CUDA graph, on the GPU's own
clock: start and end relative to the call's first kernel, and the gap (negative: overlap)
after the kernel before it; and the layer's weight bytes over its kernels' span (first
start to last end) as a fraction of the 1 GiB copy bandwidth measured in the same run
(decode_mlp.py's floor). Shows what a layer's time is made of beyond its kernels'
durations: the gaps between its kernels, and, against decode_mlp.py's graph rows (one
call per graph, replayed back to back), the graph launch's own cost per replay, which a
model's decode step (every layer in one graph) pays once per step rather than per layer.

    python benchmarks/kernel_timeline.py [--size gemma-2b] [--tokens 64] [--build-b DIR]
    python benchmarks/kernel_timeline.py --plain   # plain calls back to back, not replays

Rows: decode_mlp.py's (eager, geglu, geglu [B] with --build-b, liger, compile, cublas); each call
replayed 10 times under torch.profiler (CUPTI kernel records), the median per kernel
reported. The cublas row computes no activation (decode_mlp.py).
"""

import argparse
import statistics
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from decode_mlp import SIZES, copy_bandwidth, graphed, rows_for  # noqa: E402

REPLAYS = 10


def timeline(call, back_to_back: bool = False):
    """([(name, start_us, end_us)] per call, relative to each call's first kernel; the
    median us from one call's first kernel to the next one's, or None): REPLAYS calls,
    each followed by a sync, or with back_to_back all issued before one sync, as a
    decode loop issues them (then the period is the GPU's time per call, gaps included;
    the profiler slows each launch on the host, so a host-bound row reads slower than
    without it)."""
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(REPLAYS):
            call()
            if not back_to_back:
                torch.cuda.synchronize()
        torch.cuda.synchronize()
    kernels = sorted((e for e in prof.events() if e.device_type.name == "CUDA" and not e.name.startswith("Memcpy")),
                     key=lambda e: e.time_range.start)
    per_call = len(kernels) // REPLAYS
    assert per_call and len(kernels) == per_call * REPLAYS, f"{len(kernels)} kernels in {REPLAYS} calls"
    calls = [kernels[i * per_call:(i + 1) * per_call] for i in range(REPLAYS)]
    rows = []
    for j in range(per_call):
        starts = [c[j].time_range.start - c[0].time_range.start for c in calls]
        ends = [c[j].time_range.end - c[0].time_range.start for c in calls]
        rows.append((calls[0][j].name, statistics.median(starts), statistics.median(ends)))
    period = None
    if back_to_back:
        period = statistics.median(b[0].time_range.start - a[0].time_range.start for a, b in zip(calls, calls[1:]))
    return rows, period


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="gemma-2b", choices=sorted(SIZES))
    ap.add_argument("--tokens", default="64")
    ap.add_argument("--build-b", type=Path)
    ap.add_argument("--plain", action="store_true", help="plain calls issued back to back (decode_mlp.py's plain "
                    "mode) instead of graph replays; also prints the GPU's period per call")
    args = ap.parse_args(argv)
    bandwidth = copy_bandwidth()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, 1 GiB copy {bandwidth / 1e12:.2f} TB/s",
          flush=True)
    dim, hidden = SIZES[args.size]
    weight_bytes = 3 * dim * hidden * 2
    with torch.inference_mode():
        for tokens in (int(t) for t in args.tokens.split(",")):
            for name, call in rows_for(dim, hidden, tokens, args.build_b).items():
                rows, period = timeline(call, back_to_back=True) if args.plain else timeline(graphed(call))
                span = max(end for _, _, end in rows)  # the last to start need not end last (overlap)
                print(f"{args.size} {tokens} tokens, {name}: {span:.1f} us first start to last end, "
                      f"{weight_bytes / (span * 1e-6) / bandwidth:.1%} of the copy bandwidth for the weights"
                      + ("" if period is None else f"; {period:.1f} us per call back to back (gap {period - span:+.1f})"))
                prev_end = None
                for kname, start, end in rows:
                    gap = "" if prev_end is None else f"gap {start - prev_end:+6.1f}"
                    print(f"    {start:7.1f} {end:7.1f}  {end - start:6.1f} us  {gap:11s} {kname[:90]}")
                    prev_end = end
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
