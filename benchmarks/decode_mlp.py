"""One Gemma MLP layer at decode, in plain calls and
replayed from a CUDA graph, against the weight-read floor.

    python benchmarks/decode_mlp.py [--sizes gemma-7b,gemma-2b] [--tokens 1,16,64] [--rounds 5]
    python benchmarks/decode_mlp.py --build-b DIR   # + row "geglu [B]": DIR/build's layer
    python benchmarks/decode_mlp.py --no-compile    # without the torch.compile row

Rows, each a Transformers GemmaMLP (bf16, inference mode) on the same input:
  eager     the module as Transformers runs it (three cuBLAS GEMMs, GELU, mul);
  geglu     the module kernelized with this checkout's build/ (example.py's recipe);
  geglu [B] with --build-b, the same with another checkout's build/ (two builds in one
            process, interleaved: an A/B of a kernel change);
  liger     Liger's LigerGEGLUMLP forward on the same module (where importable);
  compile   torch.compile of the module (default mode; inductor fuses the GELU and the
            mul, cuBLAS runs the GEMMs), compiled for each shape before any timing;
  cublas    cuBLAS's GEMMs alone: the merged [2 * hidden, dim] gate/up GEMM, then the
            down GEMM on a fixed h (no activation): what the fused kernels replace.
Modes:
  plain     calls back to back, timed between two events over a burst (the host issues
            while the GPU runs, as a decode loop does: host-bound rows show it);
  graph     the call captured once in a CUDA graph and replayed (no host time).
floor: the three weights' bytes at the 1 GiB device-to-device copy's bandwidth, measured
in this run. Each (mode, row) is timed once per round, the rounds interleaved (the lent
hosts drift); the median round is reported with the spread. A table prints last; JSON to
$OUT/decode_mlp.json when OUT is set.
"""

import argparse
import copy
import functools
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import example  # noqa: E402  (the kernelize recipe the README documents)
from compare_mlp import graphed  # noqa: E402  (its CUDA-graph capture)

SIZES = {"gemma-2b": (2048, 16384), "gemma-7b": (3072, 24576)}  # (dim, hidden)
BURST = 50  # plain calls per timed burst


def copy_bandwidth() -> float:
    """Bytes/s of a 1 GiB device-to-device copy (it reads and writes 1 GiB each)."""
    src = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    t = statistics.median(timed_burst(lambda: dst.copy_(src), 10) for _ in range(5))
    return 2 * src.numel() / (t * 1e-6)


def timed_burst(call, n: int = BURST) -> float:
    """us per call of n calls back to back, between two events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(n):
        call()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / n


def liger_forward(module):
    try:
        from liger_kernel.transformers import LigerGEGLUMLP
    except ImportError:
        return None
    m = copy.deepcopy(module)
    m.forward = LigerGEGLUMLP.forward.__get__(m)
    return m


def rows_for(dim: int, hidden: int, tokens: int, build_b: "Path | None" = None, compile_row: bool = True):
    """{row: call()} on one input, each checked against eager first."""
    from transformers import GemmaConfig
    from transformers.models.gemma.modeling_gemma import GemmaMLP

    torch.manual_seed(0)
    with torch.device("cuda"):
        eager = GemmaMLP(GemmaConfig(hidden_size=dim, intermediate_size=hidden, hidden_act="gelu_pytorch_tanh"))
    eager = eager.to(torch.bfloat16).eval()
    x = torch.randn(1, tokens, dim, device="cuda", dtype=torch.bfloat16)
    layers = {"eager": eager, "geglu": example.kernelize_with_geglu(copy.deepcopy(eager), layer=example.local_layer)}
    if build_b is not None:
        layer_b = functools.partial(example.local_layer, path=build_b.resolve())
        layers["geglu [B]"] = example.kernelize_with_geglu(copy.deepcopy(eager), layer=layer_b)
    lig = liger_forward(eager)
    if lig is not None:
        layers["liger"] = lig
    if compile_row:
        layers["compile"] = torch.compile(copy.deepcopy(eager), dynamic=False)
    calls = {name: (lambda m=m: m(x)) for name, m in layers.items()}
    w_gate_up = torch.cat([eager.gate_proj.weight, eager.up_proj.weight])
    h = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
    x2 = x.view(tokens, dim)

    def cublas():
        F.linear(x2, w_gate_up)
        return F.linear(h, eager.down_proj.weight)

    calls["cublas"] = cublas
    ref = eager(x).double()
    for name in layers:
        y = calls[name]()
        err = ((y.double() - ref).norm() / ref.norm()).item()
        assert err < 1e-2, (name, err)
    return calls


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="gemma-7b,gemma-2b")
    ap.add_argument("--tokens", default="1,16,64")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-compile", action="store_true", help="leave out the torch.compile row (it compiles "
                    "the module once per shape: a few seconds each)")
    ap.add_argument("--build-b", type=Path, help="a directory holding another build/ (e.g. a kernel change's): "
                    "its kernelized layer is timed too, interleaved with this checkout's, as row 'geglu [B]'")
    args = ap.parse_args(argv)

    bandwidth = copy_bandwidth()
    meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, date=time.strftime("%Y-%m-%d"),
                copy_tbps=bandwidth / 1e12, rounds=args.rounds, burst=BURST)
    print(f"{meta['device']}, torch {meta['torch']}, 1 GiB copy {meta['copy_tbps']:.2f} TB/s", flush=True)
    results = []
    with torch.inference_mode():
        for size in args.sizes.split(","):
            dim, hidden = SIZES[size]
            floor_us = 3 * dim * hidden * 2 / bandwidth * 1e6
            for tokens in (int(t) for t in args.tokens.split(",")):
                calls = rows_for(dim, hidden, tokens, args.build_b, not args.no_compile)
                timed = {}
                for name, call in calls.items():
                    for _ in range(3):  # warm (JIT, autotuning) before anything is timed
                        call()
                    timed[("plain", name)] = lambda call=call: timed_burst(call)
                    replay = graphed(call)
                    timed[("graph", name)] = lambda replay=replay: timed_burst(replay)
                samples = {key: [] for key in timed}
                for _ in range(args.rounds):
                    for key, fn in timed.items():
                        samples[key].append(fn())
                for (mode, name), s in samples.items():
                    results.append(dict(size=size, tokens=tokens, mode=mode, row=name, us=statistics.median(s),
                                        spread=[min(s), max(s)], floor_us=floor_us))
                print(f"{size} {tokens} token(s) done", flush=True)
                del calls, timed
                torch.cuda.empty_cache()

    print(f"\n== Gemma MLP at decode, us (median of {args.rounds} interleaved rounds, spread), bf16, "
          f"{meta['device']}; x floor = time / weight-read floor")
    print(f"{'size':9} {'tokens':>6} {'mode':6} {'row':9} {'us':>8} {'spread':>13} {'x floor':>8} {'eager/row':>9}")
    for r in results:
        eager_us = next(e["us"] for e in results if e["row"] == "eager" and e["mode"] == r["mode"]
                        and e["size"] == r["size"] and e["tokens"] == r["tokens"])
        lo, hi = r["spread"]
        print(f"{r['size']:9} {r['tokens']:6} {r['mode']:6} {r['row']:9} {r['us']:8.1f} {f'{lo:.1f}-{hi:.1f}':>13} "
              f"{r['us'] / r['floor_us']:7.3f}x {eager_us / r['us']:8.2f}x")
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "decode_mlp.json").write_text(json.dumps(dict(meta=meta, rows=results), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
