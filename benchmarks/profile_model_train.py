"""Where a kernelized model's training step spends its GPU time, row by row.

Builds compare_models.py's 8-layer Gemma (random weights, bf16), times the training step
of each --rows row with compare_models' train mode (tokens/s, median of --iters after
--warmup steps), then profiles two more steps and prints the kernels by total GPU time
per step. Run it in several processes to compare a slow process with a fast one:

    python benchmarks/profile_model_train.py --size gemma-2b --rows eager,geglu
"""

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compare_models as cm  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="gemma-2b", choices=list(cm.SIZES))
    ap.add_argument("--rows", default="eager,geglu")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=7)
    ap.add_argument("--top", type=int, default=15)
    a = ap.parse_args()
    base = cm.build_model(cm.SIZES[a.size], a.layers, 256000, "cuda", torch.bfloat16)
    ids = torch.randint(2, 256000, (1, a.tokens), generator=torch.Generator().manual_seed(1)).cuda()
    from torch.profiler import ProfilerActivity, profile

    for row in a.rows.split(","):
        model = cm.make_row(row, base, "cuda", training=True)
        r = cm.train_rates(model, ids, "cuda", a.warmup, a.iters)
        print(f"== {a.size} {row}: {r['train_tokens_per_s']:,.0f} tok/s "
              f"(steps {' '.join(f'{t:.1f}' for t in r['train_step_ms'])} ms)", flush=True)
        step = cm.train_step(model, ids)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(2):
                step()
            torch.cuda.synchronize()
        kernels = {}
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                k = kernels.setdefault(e.name[:110], [0.0, 0])
                k[0] += e.device_time_total / 2
                k[1] += 1
        total = sum(v[0] for v in kernels.values())
        print(f"   GPU kernel time per step {total / 1e3:.1f} ms in {sum(v[1] for v in kernels.values()) // 2} kernels")
        for name, (us, n) in sorted(kernels.items(), key=lambda kv: -kv[1][0])[: a.top]:
            print(f"   {us / 1e3:8.2f} ms  x{n // 2:<4d} {name}")
        del model, step
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
