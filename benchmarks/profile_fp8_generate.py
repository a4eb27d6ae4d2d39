"""Where a decode step of the FP8 Gemma goes, against the bf16 model: `generate()` with the
static cache (compiled, CUDA graphs), each model's kernels under torch.profiler (CUPTI
records the graph's kernels), summed per step by kind, and the GPU's busy share of the
step (the union of its kernels' intervals over the wall time).

    python benchmarks/profile_fp8_generate.py [--size gemma-7b] [--layers 8] [--batch 1]

Models as benchmarks/compare_fp8_models.py builds them (random weights; the FP8 one saved
and reloaded with FineGrainedFP8Config, then kernelized).
"""

import argparse
import os
import sys
from collections import defaultdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_fp8_models import make_rows  # noqa: E402
from compare_models import REPO, SIZES, build_model, raise_recompile_limit  # noqa: E402

# Kernel name fragments -> kind, first match wins.
KINDS = [
    ("fp8 decode gate/up", ("fp8_decode7gate_up", "gate_up<")),
    ("fp8 decode down", ("fp8_decode4down", "down<")),
    ("fp8 quantize x", ("quantize_rows",)),
    ("GEMM", ("gemm", "cutlass", "xmma", "nvjet", "sm90_", "cublas")),
    ("attention", ("flash", "attention", "sdpa", "fmha")),
]


def kind(name: str) -> str:
    low = name.lower()
    for k, fragments in KINDS:
        if any(f.lower() in low for f in fragments):
            return k
    return "other (norms, rope, elementwise, ...)"


def busy_us(intervals):
    total, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if e > end:
            total += e - max(s, end)
            end = e
    return total


def profile_generate(model, prompt, new_tokens):
    kw = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, use_cache=True,
              pad_token_id=0, cache_implementation="static")
    for _ in range(2):  # compile, CUDA-graph recording
        model.generate(prompt, **kw)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        model.generate(prompt, **kw)
        end.record()
        torch.cuda.synchronize()
    wall = start.elapsed_time(end) * 1e3
    per_kind, per_name, intervals, count = defaultdict(float), defaultdict(lambda: [0.0, 0]), [], 0
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and e.time_range.elapsed_us() > 0:
            per_kind[kind(e.name)] += e.time_range.elapsed_us()
            per_name[e.name][0] += e.time_range.elapsed_us()
            per_name[e.name][1] += 1
            intervals.append((e.time_range.start, e.time_range.end))
            count += 1
    cpu = defaultdict(float)
    for e in prof.key_averages():
        if e.self_cpu_time_total > 0:
            cpu[e.key] += e.self_cpu_time_total
    return wall, per_kind, per_name, busy_us(intervals), count, cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", choices=sorted(SIZES), default="gemma-7b")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--kernel-top", type=int, default=12, help="kernels listed per row, by GPU time")
    ap.add_argument("--cpu-top", type=int, default=15, help="host ops listed per row")
    args = ap.parse_args()
    args.swap, args.device, args.transformers_route, args.bound = False, "cuda", False, False
    os.environ.setdefault("LOCAL_KERNELS", f"org/geglu={REPO}")
    raise_recompile_limit()
    base = build_model(SIZES[args.size], args.layers, args.vocab, "cuda", torch.bfloat16)
    rows = make_rows(base, args)
    torch.manual_seed(3)
    prompt = torch.randint(0, args.vocab, (args.batch, 16), device="cuda")
    print(f"{torch.cuda.get_device_name()}, {args.size} x {args.layers} layers, batch {args.batch}, static cache, "
          f"{args.new_tokens} new tokens; us per decode step")
    for name in ("bf16 eager", "fp8 geglu"):
        torch._dynamo.utils.counters.clear()
        wall, per_kind, per_name, busy, count, cpu = profile_generate(rows[name], prompt, args.new_tokens)
        n = args.new_tokens
        kinds = ", ".join(f"{k} {v / n:.1f}" for k, v in sorted(per_kind.items(), key=lambda kv: -kv[1]))
        print(f"{name}: wall {wall / n:.1f}, GPU busy {busy / n:.1f} ({busy / wall:.0%}), "
              f"{count / n:.0f} kernels; {kinds}")
        for k, (us, calls) in sorted(per_name.items(), key=lambda kv: -kv[1][0])[:args.kernel_top]:
            print(f"    {us / n:8.1f} us/step  {calls / n:5.1f} calls/step  {us / calls:6.2f} us/call  {k[:110]}")
        c = torch._dynamo.utils.counters
        print(f"  compiled graphs {c['stats'].get('unique_graphs', 0)}, graph breaks {sum(c['graph_break'].values())}"
              + "".join(f"\n    break: {k[:160]} x{v}" for k, v in c["graph_break"].items()))
        top = sorted(cpu.items(), key=lambda kv: -kv[1])[:args.cpu_top]
        print("  host (self CPU us per step, under the profiler): "
              + ", ".join(f"{k} {v / n:.1f}" for k, v in top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
