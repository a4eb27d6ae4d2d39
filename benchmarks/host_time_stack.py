"""Host time per MLP call when a model's layers take turns: L GemmaMLP layers (Gemma-2B
widths, each its own weights) called in rotation, as a decode step calls them.

host_time.py times one layer over and over. The op's launchers keep a small cache of
built kernel params per shape and pointers (sm90_launcher.cuh, 8 entries per kernel):
with more layers than entries, each call may build its params again (TMA descriptors
encoded on the host). This measures whether the per-call host time grows with L.

    python benchmarks/host_time_stack.py [--layers 1,8,18,28] [--tokens 1]
"""

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import example  # noqa: E402


def per_call_us(layers, x, rounds=7, steps=50):
    """Median over rounds of (host time of `steps` passes over the layers) / calls."""
    out = []
    with torch.inference_mode():
        for _ in range(rounds):
            torch.cuda.synchronize()
            t = []
            for _ in range(steps):
                t0 = time.perf_counter()
                for m in layers:
                    m(x)
                t.append((time.perf_counter() - t0) / len(layers))
                if len(t) % 4 == 0:
                    torch.cuda.synchronize()  # keep the GPU queue short
            out.append(statistics.median(t) * 1e6)
    return statistics.median(out), min(out), max(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", default="1,8,18,28")
    ap.add_argument("--tokens", type=int, default=1)
    a = ap.parse_args()
    from transformers import GemmaConfig
    from transformers.models.gemma.modeling_gemma import GemmaMLP

    counts = [int(n) for n in a.layers.split(",")]
    cfg = GemmaConfig(hidden_size=2048, intermediate_size=16384, hidden_act="gelu_pytorch_tanh")
    torch.manual_seed(0)
    with torch.device("cuda"):
        eager = [GemmaMLP(cfg).to(torch.bfloat16).eval() for _ in range(max(counts))]
        x = torch.randn(1, a.tokens, 2048, dtype=torch.bfloat16)
    geglu = [example.kernelize_with_geglu(copy.deepcopy(m), layer=example.local_layer) for m in eager]
    with torch.inference_mode():
        for m, g in zip(eager, geglu):
            ref = m(x).float()
            err = (g(x).float() - ref).abs().max().item()
            assert err <= 0.05 * ref.abs().max().item() + 1e-3, err
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {a.tokens} token(s); us per MLP call "
          f"(median of 7 rounds, range)")
    for n in counts:
        for label, stack in (("eager", eager[:n]), ("geglu", geglu[:n])):
            med, lo, hi = per_call_us(stack, x)
            print(f"  {n:3d} layers  {label:6s} {med:7.1f}  ({lo:.1f}-{hi:.1f})")


if __name__ == "__main__":
    main()
