"""Host time of one layer call: what each MLP forward costs the CPU before the GPU runs it.

A decode step of a small model is bound by the host issuing kernels; the target
is one MLP call at <= 15 us of host time. For each layer (eager module, geglu's
kernelized layer, Liger's layer where importable) at a decode shape, this measures:

  host us    the time from the call to its return, per call, with the GPU behind (no
             sync inside a burst of calls, so no call waits for a kernel): the host's
             cost alone. Median over several interleaved rounds, with the spread.
  prof us    the CPU time of one call as torch.profiler records it (a record_function
             range around each call; the profiler adds its own overhead to both rows).

    python benchmarks/host_time.py                        # GPU, Gemma-2B sizes, M = 1
    python benchmarks/host_time.py --device cpu --tiny    # smoke test of the script
    python benchmarks/host_time.py --build-b DIR          # + row "geglu [B]": DIR/build's layer

Prints a table last; JSON to $OUT/host_time.json when OUT is set.
"""

import argparse
import copy
import functools
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import example  # noqa: E402  (the kernelize recipe the README documents)

BURST = 20  # calls between syncs: the GPU queue stays short (4 launches per call)


def modules(args):
    """(label, eager module, input) per layer family, at decode shapes."""
    from transformers import BertConfig, GemmaConfig, T5Config
    from transformers.models.bert.modeling_bert import BertIntermediate
    from transformers.models.gemma.modeling_gemma import GemmaMLP
    from transformers.models.t5.modeling_t5 import T5DenseGatedActDense

    dim, hidden = (64, 256) if args.tiny else (2048, 16384)
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    torch.manual_seed(0)
    with torch.device(args.device):
        gemma = GemmaMLP(GemmaConfig(hidden_size=dim, intermediate_size=hidden, hidden_act="gelu_pytorch_tanh"))
        t5 = T5DenseGatedActDense(
            T5Config(d_model=dim, d_ff=hidden, feed_forward_proj="gated-gelu", dropout_rate=0.0)
        )
        bert = BertIntermediate(BertConfig(hidden_size=dim, intermediate_size=hidden, hidden_act="gelu"))
        x = torch.randn(1, args.tokens, dim)
    return [(name, m.to(dtype).eval(), x.to(dtype)) for name, m in (("GemmaMLP", gemma), ("T5 gated-GELU", t5), ("BertIntermediate", bert))]


def liger(module):
    try:
        from liger_kernel.transformers import LigerGEGLUMLP
    except ImportError:
        return None
    if type(module).__name__ != "GemmaMLP":
        return None
    m = copy.deepcopy(module)
    m.forward = LigerGEGLUMLP.forward.__get__(m)
    return m


def host_us(call, device: str, calls: int) -> float:
    """Median host time of `call()` (no arguments) over `calls` calls, in bursts between
    syncs (the GPU stays behind, so no call waits for a kernel)."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    times = []
    with torch.inference_mode():
        while len(times) < calls:
            sync()
            for _ in range(BURST):
                t0 = time.perf_counter()
                call()
                times.append(time.perf_counter() - t0)
    sync()
    return statistics.median(times) * 1e6


def add_call_args(ap: argparse.ArgumentParser, calls: int) -> None:
    """The options of the host-time benchmarks (this one and host_breakdown.py)."""
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--tokens", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=calls)


def profiled_us(fn, x, device: str, calls: int = 50) -> float:
    acts = [torch.profiler.ProfilerActivity.CPU]
    with torch.inference_mode(), torch.profiler.profile(activities=acts) as prof:
        for _ in range(calls):
            with torch.profiler.record_function("layer_call"):
                fn(x)
    if device == "cuda":
        torch.cuda.synchronize()
    events = [e for e in prof.events() if e.name == "layer_call"]
    return statistics.median(e.cpu_time_total for e in events)  # us


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_call_args(ap, calls=200)
    ap.add_argument("--build-b", type=Path, help="a directory holding another build/ (e.g. the previous commit's): "
                    "its kernelized layer is timed too, interleaved with this checkout's, as row 'geglu [B]'")
    args = ap.parse_args(argv)

    rows = []
    for name, eager, x in modules(args):
        geglu = example.kernelize_with_geglu(copy.deepcopy(eager), layer=example.local_layer)
        candidates = {"eager": eager, "geglu": geglu}
        if args.build_b is not None:
            layer_b = functools.partial(example.local_layer, path=args.build_b.resolve())
            candidates["geglu [B]"] = example.kernelize_with_geglu(copy.deepcopy(eager), layer=layer_b)
        lig = liger(eager)
        if lig is not None:
            candidates["liger"] = lig
        with torch.inference_mode():
            ref = eager(x).float()
            for label, m in candidates.items():  # warm up (JIT compiles, autotuning) and check
                for _ in range(3):
                    y = m(x)
                err = (y.float() - ref).abs().max().item()
                assert err <= 0.05 * ref.abs().max().item() + 1e-3, (name, label, err)
        samples = {label: [] for label in candidates}
        for _ in range(args.rounds):  # interleaved: host noise hits every row alike
            for label, m in candidates.items():
                samples[label].append(host_us(functools.partial(m, x), args.device, args.calls))
        for label, m in candidates.items():
            s = samples[label]
            rows.append(
                dict(
                    layer=name,
                    row=label,
                    host_us=statistics.median(s),
                    spread_us=[min(s), max(s)],
                    profiled_us=profiled_us(m, x, args.device),
                )
            )

    meta = dict(
        device=torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or "cpu",
        torch=torch.__version__,
        python=platform.python_version(),
        date=time.strftime("%Y-%m-%d"),
        tokens=args.tokens,
        rounds=args.rounds,
        calls_per_round=args.calls,
    )
    print(f"\n== host time per call ({meta['device']}, torch {meta['torch']}, {args.tokens} token(s), "
          f"median of {args.rounds} rounds x {args.calls} calls)")
    print(f"{'layer':18} {'row':9} {'host us':>8} {'spread':>15} {'prof us':>8} {'vs eager':>8}")
    eager_us = {r["layer"]: r["host_us"] for r in rows if r["row"] == "eager"}
    for r in rows:
        lo, hi = r["spread_us"]
        print(
            f"{r['layer']:18} {r['row']:9} {r['host_us']:8.1f} {f'{lo:.1f}-{hi:.1f}':>15} {r['profiled_us']:8.1f} "
            f"{eager_us[r['layer']] / r['host_us']:7.2f}x"
        )
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "host_time.json").write_text(json.dumps(dict(meta=meta, rows=rows), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
