"""Fused-GEMM benchmark: the GeGLU MLP, bias+GELU linears and a training step, against
what users run instead, on one GPU, one process, the same inputs for every variant.

    python -m tools.build && python benchmarks/compare_mlp.py

MLP forward at the shapes (tokens, dim, hidden) of MLP_SHAPES (blog, Gemma-2B, Gemma-7B,
and Gemma-7B at 16 tokens: decode):
eager (5 kernels), torch.compile, Liger (LigerGELUMulFunction between cuBLAS GEMMs, the
kernel behind kernels-community/liger-kernels' LigerGEGLUMLP; skipped with a note when
liger-kernel is missing), cuBLAS GEMMs alone (merged gate/up GEMM + down GEMM, no
activation), and ours (geglu_mlp); plus geglu_linear alone against the merged
gate/up cuBLAS GEMM it replaces. Decode is also timed replayed from a CUDA graph (what
decoding loops run; plain calls include Python launch overhead).
linear_bias_gelu at (8192; 1024 -> 4096), (8192; 1600 -> 6400) and 64 tokens of the
first, against torch._addmm_activation(bias, x, w.t(), use_gelu=True) (cuBLASLt
bias+GELU epilogue, what our tanh path calls without gradients) and eager
F.gelu(F.linear(...)) = cuBLAS + a GELU pass, for tanh and for exact GELU. Training step
(forward + backward for x and all weights) at the blog shape against eager autograd,
torch.compile and Liger: ours (on a compiled variant: the native op _geglu_mlp,
cuBLAS gate/up GEMMs + elementwise GeGLU saving gate/up and h, cuBLAS grad @ w_down +
elementwise GeGLU backward) and ours_composed (autograd over F.linear + the package's
geglu + F.linear: what variants without the compiled op, and torch.compile, run).
The decode case's weight-read floor is its weight bytes at the copy bandwidth measured
in this run (1 GiB device-to-device copy).

Times: microseconds, bf16; each variant of a case is timed by triton.testing.do_bench
(median) in ROUNDS interleaved rounds, and the median round is reported (all rounds in
the JSON), so slow drift of the clocks or the host reaches every variant alike. TFLOP/s counts the GEMM
FLOPs only; "ceiling" is the fraction of a 8192^3 bf16 matmul measured in this run.
A table prints last; JSON goes to $OUT/mlp_bench.json (when OUT is set) and
benchmarks/results/mlp_<device>.json.
"""

import datetime
import json
import os
import re
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parent.parent
DT = torch.bfloat16

# Reference times of eager, torch.compile, Liger and cuBLAS at MLP_SHAPES, measured
# earlier on an H200, microseconds; each run prints its own time against them.
ANCHORS = {
    "blog": {"eager": 248.9, "compile": 220.7, "liger": 229.3, "cublas": 192.7},
    "gemma2b": {"eager": 1369.7, "compile": 1308.2, "liger": 1350.6, "cublas": 1262.8},
    "gemma7b": {"eager": 2971.1, "compile": 2873.8, "liger": 2912.6, "cublas": 2779.9},
    "decode": {"eager": 137.4, "compile": 134.9, "liger": 138.2, "cublas": 130.3},
}
MLP_SHAPES = {  # name: (tokens, dim, hidden)
    "blog": (8192, 768, 3072),
    "gemma2b": (4096, 2048, 16384),
    "gemma7b": (4096, 3072, 24576),
    "decode": (16, 3072, 24576),
}
ROUNDS = 5
GELU_SHAPES = {"bert_large": (8192, 1024, 4096), "gpt2_xl": (8192, 1600, 6400), "bert_large_m64": (64, 1024, 4096)}


def bench_us(fn, rep=100) -> float:
    from triton.testing import do_bench

    return do_bench(fn, warmup=25, rep=rep, return_mode="median") * 1e3


def interleaved_us(fns: dict, rounds: int = ROUNDS) -> dict:
    """{name: (median round, [every round])}: each round times every fn once, in order."""
    samples = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            samples[k].append(bench_us(fn))
    return {k: (sorted(v)[len(v) // 2], v) for k, v in samples.items()}


def graphed(fn):
    """fn captured in a CUDA graph (warmed on a side stream first); returns its replay."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


def graph_us(fn) -> float:
    """Time fn replayed from a CUDA graph (no Python / launch overhead)."""
    return bench_us(graphed(fn))


def rel_err(a, b) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def device_short(name: str) -> str:
    m = re.search(r"([a-z]\d{2,4})", name.lower().replace("nvidia", ""))
    return m.group(1) if m else re.sub(r"\W+", "_", name.lower()).strip("_")


def load_kernel():
    from kernels import get_kernel

    # This checkout's build/ for org/geglu; other LOCAL_KERNELS entries (an anchor's kernel
    # staged offline, say) stay.
    others = [e for e in os.environ.get("LOCAL_KERNELS", "").split(":") if e and not e.startswith("org/geglu=")]
    os.environ["LOCAL_KERNELS"] = ":".join([f"org/geglu={REPO}", *others])
    return get_kernel("org/geglu", version=1)


def liger_geglu():
    try:
        from liger_kernel.ops.geglu import LigerGELUMulFunction
    except ImportError as e:
        return None, f"liger-kernel not importable ({e}); Liger column skipped"
    return LigerGELUMulFunction.apply, None


def main() -> int:
    import triton

    torch.backends.cuda.matmul.allow_tf32 = True
    geglu = load_kernel()
    dev = "cuda"
    props = torch.cuda.get_device_properties(0)
    res = {
        "device": props.name,
        "capability": f"{props.major}.{props.minor}",
        "torch": torch.__version__,
        "triton": triton.__version__,
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "dtype": "bfloat16",
        "notes": [],
    }
    a = torch.randn(8192, 8192, device=dev, dtype=DT)
    b = torch.randn(8192, 8192, device=dev, dtype=DT)
    ceiling = 2 * 8192**3 / (bench_us(lambda: a @ b) * 1e-6) / 1e12
    res["matmul_ceiling_tflops"] = ceiling
    del a, b
    # Bandwidth ceiling for the weight-bound decode case: a 1 GiB device-to-device copy
    # (reads + writes 2 GiB), as the activation benchmarks measure it.
    src = torch.empty(2**30, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    copy_bw = 2 * src.numel() / (bench_us(lambda: dst.copy_(src)) * 1e-6)
    res["copy_bandwidth_tbps"] = copy_bw / 1e12
    del src, dst
    print(f"{props.name}: 8192^3 bf16 matmul {ceiling:.0f} TFLOP/s, 1 GiB copy {copy_bw / 1e12:.2f} TB/s; "
          f"torch {torch.__version__}, triton {triton.__version__}")

    liger, note = liger_geglu()
    if note:
        res["notes"].append(note)
        print(note)

    def rate(flops, us, rounds=None):
        tf = flops / (us * 1e-6) / 1e12
        r = {"us": us, "tflops": tf, "ceiling_frac": tf / ceiling}
        if rounds is not None:
            r["rounds_us"] = rounds
        return r

    def rates(flops, fns):
        return {k: rate(flops, us, v) for k, (us, v) in interleaved_us(fns).items()}

    # ---------------------------------------------------------------- MLP forward
    res["mlp"] = {}
    for name, (m, d, h) in MLP_SHAPES.items():
        g = torch.Generator(device=dev).manual_seed(0)
        x = torch.randn(m, d, device=dev, dtype=DT, generator=g)
        wg = torch.randn(h, d, device=dev, dtype=DT, generator=g) * d**-0.5
        wu = torch.randn(h, d, device=dev, dtype=DT, generator=g) * d**-0.5
        wd = torch.randn(d, h, device=dev, dtype=DT, generator=g) * h**-0.5
        wgu = torch.cat([wg, wu])
        h_tmp = torch.randn(m, h, device=dev, dtype=DT, generator=g)

        def eager():
            return F.linear(F.gelu(F.linear(x, wg), approximate="tanh") * F.linear(x, wu), wd)

        compiled = torch.compile(eager, dynamic=False)

        def ours():
            return geglu.geglu_mlp(x, wg, wu, wd)

        def gemms_only():
            F.linear(x, wgu)
            return F.linear(h_tmp, wd)

        variants = {"eager": eager, "compile": compiled, "cublas": gemms_only, "ours": ours}
        if liger is not None:
            variants["liger"] = lambda: F.linear(liger(F.linear(x, wg), F.linear(x, wu)), wd)
        with torch.no_grad():
            ref = eager()
            err = rel_err(ours(), ref)
            assert err < 2e-2, (name, err)
            flops = 2 * m * d * h * 3
            r = rates(flops, variants)
            r["ours"]["rel_err_vs_eager"] = err
            # The gate/up half alone: our fused GEMM against one cuBLAS GEMM of N = 2*hidden.
            r.update(rates(2 * m * d * 2 * h, {"geglu_linear": lambda: geglu.geglu_linear(x, wg, wu),
                                               "cublas_gate_up": lambda: F.linear(x, wgu)}))
            r["cublas_down"] = rate(2 * m * d * h, bench_us(lambda: F.linear(h_tmp, wd)))
            if m <= 64:
                r["ours_graph"] = rate(flops, graph_us(ours))
                r["eager_graph"] = rate(flops, graph_us(eager))
                r["cublas_graph"] = rate(flops, graph_us(gemms_only))
                weight_bytes = 3 * h * d * 2
                r["weight_read_floor_us"] = weight_bytes / copy_bw * 1e6  # at this GPU's measured copy bandwidth
                r["ours"]["floor_frac"] = r["weight_read_floor_us"] / r["ours"]["us"]
        r["ratios_ours_vs_anchor"] = {k: v / r["ours"]["us"] for k, v in ANCHORS[name].items()}
        r["ratios_ours_vs_measured"] = {k: r[k]["us"] / r["ours"]["us"] for k in variants if k != "ours"}
        res["mlp"][name] = r
        print(f"{name} {m}x{d}x{h}: " + ", ".join(f"{k} {v['us']:.1f}" for k, v in r.items() if isinstance(v, dict) and "us" in v), flush=True)
        del x, wg, wu, wd, wgu, h_tmp, compiled
        torch.cuda.empty_cache()

    # ---------------------------------------------------------------- gate/up engines
    # The fused gate/up GEMM's two engines side by side, the Hopper CUTLASS engine (where
    # the loaded variant has it) and the Triton kernel, against one cuBLAS GEMM of the
    # merged [2*hidden, dim] weight (no activation), per token count: what linear.py's
    # choice of engine rests on (docs/DESIGN.md).
    ops = geglu._ops.ops
    res["gate_up_engines"] = {}
    for (d, h) in sorted({(d, h) for _, d, h in MLP_SHAPES.values()}):
        for m in (16, 64, 256, 1024, 4096, 8192):
            x = torch.randn(m, d, device=dev, dtype=DT)
            wgu = torch.randn(2 * h, d, device=dev, dtype=DT) * d**-0.5
            wg, wu = wgu[:h], wgu[h:]
            ref = F.gelu(F.linear(x, wg).float(), approximate="tanh") * F.linear(x, wu).float()
            engines = {"cublas_merged": lambda: F.linear(x, wgu),
                       "triton": lambda: geglu.triton_kernels.gemm.geglu_forward(x, wg, wu, None, None, "tanh")}
            if torch.cuda.get_device_capability() == (9, 0):  # the native op runs the engine there
                engines["sm90"] = lambda: ops._geglu_linear(x, wg, wu, None, None, "tanh")
            for kk, fn in engines.items():
                if kk != "cublas_merged":
                    err = rel_err(fn(), ref)
                    assert err < 2e-2, (kk, m, d, h, err)
            row = rates(2 * m * d * 2 * h, engines)
            res["gate_up_engines"][f"{m}x{d}x{h}"] = row
            print(f"gate/up {m}x{d}->{h}: " + ", ".join(f"{kk} {v['us']:.1f} us ({v['tflops']:.0f} TF)" for kk, v in row.items()), flush=True)
            del x, wgu, wg, wu, ref
    torch.cuda.empty_cache()

    # ---------------------------------------------------------------- linear + bias + GELU
    res["linear_bias_gelu"] = {}
    for name, (m, k, n) in GELU_SHAPES.items():
        x = torch.randn(m, k, device=dev, dtype=DT)
        w = torch.randn(n, k, device=dev, dtype=DT) * k**-0.5
        bias = torch.randn(n, device=dev, dtype=DT)
        variants = {
            "addmm_activation": lambda: torch._addmm_activation(bias, x, w.t(), use_gelu=True),
            "eager": lambda: F.gelu(F.linear(x, w, bias), approximate="tanh"),
            "ours": lambda: geglu.linear_bias_gelu(x, w, bias, approximate="tanh"),
            "eager_exact": lambda: F.gelu(F.linear(x, w, bias)),
            "ours_exact": lambda: geglu.linear_bias_gelu(x, w, bias, approximate="none"),
        }
        with torch.no_grad():
            err = rel_err(variants["ours"](), variants["eager"]())
            assert err < 2e-2, (name, err)
            err = rel_err(variants["ours_exact"](), variants["eager_exact"]())
            assert err < 2e-2, (name, "exact", err)
            r = rates(2 * m * k * n, variants)
        r["ratios_ours_vs"] = {kk: r[kk]["us"] / r["ours"]["us"] for kk in ("addmm_activation", "eager")}
        r["ratios_ours_exact_vs"] = {kk: r[kk]["us"] / r["ours_exact"]["us"] for kk in ("addmm_activation", "eager_exact")}
        res["linear_bias_gelu"][name] = r
        print(f"linear_bias_gelu {name} {m}x{k}->{n}: " + ", ".join(f"{kk} {v['us']:.1f}" for kk, v in r.items() if "us" in v), flush=True)

    # ---------------------------------------------------------------- training step
    m, d, h = MLP_SHAPES["blog"]
    x = torch.randn(m, d, device=dev, dtype=DT, requires_grad=True)
    wg = (torch.randn(h, d, device=dev, dtype=DT) * d**-0.5).requires_grad_()
    wu = (torch.randn(h, d, device=dev, dtype=DT) * d**-0.5).requires_grad_()
    wd = (torch.randn(d, h, device=dev, dtype=DT) * h**-0.5).requires_grad_()
    dy = torch.randn(m, d, device=dev, dtype=DT)
    params = (x, wg, wu, wd)

    def step(fn):
        return lambda: torch.autograd.grad(fn(), params, dy)

    def eager_mlp():
        return F.linear(F.gelu(F.linear(x, wg), approximate="tanh") * F.linear(x, wu), wd)

    def ours_mlp():
        return geglu.geglu_mlp(x, wg, wu, wd)

    compiled_mlp = torch.compile(eager_mlp, dynamic=False)

    ref = step(eager_mlp)()
    flops = 3 * 2 * m * d * h * 3  # forward + two backward GEMMs per forward GEMM
    # The step is close to host-bound on these machines, so its time moves with host
    # noise: the anchors and our default run in ROUNDS interleaved rounds, and
    # each reports its median round (every round is kept in the JSON).
    anchors = {"eager": step(eager_mlp), "compile": step(compiled_mlp), "ours": step(ours_mlp)}
    if liger is not None:
        anchors["liger"] = step(lambda: F.linear(liger(F.linear(x, wg), F.linear(x, wu)), wd))
    train = rates(flops, anchors)
    # ours_composed: the composition that variants without the compiled op run.
    errs = {"ours": [rel_err(a_, b_) for a_, b_ in zip(step(ours_mlp)(), ref)]}
    assert max(errs["ours"]) < 3e-2, ("ours", errs["ours"])
    composed_mlp = lambda: F.linear(geglu.geglu(F.linear(x, wg), F.linear(x, wu), "tanh"), wd)  # noqa: E731
    errs["ours_composed"] = [rel_err(a_, b_) for a_, b_ in zip(step(composed_mlp)(), ref)]
    assert max(errs["ours_composed"]) < 3e-2, ("ours_composed", errs["ours_composed"])
    train["ours_composed"] = rate(flops, bench_us(step(composed_mlp)))
    train["grad_rel_err"] = errs
    modes = ("ours", "ours_composed")
    train["speedup_vs_eager"] = {kk: train["eager"]["us"] / train[kk]["us"] for kk in modes}
    train["speedup_vs"] = {kk: train[kk]["us"] / train["ours"]["us"] for kk in ("eager", "compile", "liger") if kk in train}
    res["training_blog"] = train
    print("training step (blog): " + ", ".join(f"{kk} {v['us']:.1f}" for kk, v in train.items() if isinstance(v, dict) and "us" in v))
    print("  rounds (us): " + "; ".join(f"{kk} " + " ".join(f"{t:.0f}" for t in train[kk]["rounds_us"]) for kk in anchors))

    # ---------------------------------------------------------------- report
    print(f"\n{'case':<34} {'ours us':>9} {'TFLOP/s':>8} {'ceil':>5}  vs (x = their time / ours)")
    for name, r in res["mlp"].items():
        vs = " ".join(f"{k}={v:.2f}" for k, v in r["ratios_ours_vs_measured"].items())
        print(f"{'mlp ' + name:<34} {r['ours']['us']:>9.1f} {r['ours']['tflops']:>8.0f} {r['ours']['ceiling_frac']:>5.2f}  {vs}")
        gl = r["geglu_linear"]
        print(f"{'  geglu_linear ' + name:<34} {gl['us']:>9.1f} {gl['tflops']:>8.0f} {gl['ceiling_frac']:>5.2f}  "
              f"cublas_gate_up={r['cublas_gate_up']['us'] / gl['us']:.2f}")  # fmt: skip
        if "ours_graph" in r:
            print(f"{'  graph ' + name:<34} {r['ours_graph']['us']:>9.1f} {'':>8} {'':>5}  "
                  f"eager={r['eager_graph']['us'] / r['ours_graph']['us']:.2f} cublas={r['cublas_graph']['us'] / r['ours_graph']['us']:.2f} "
                  f"weight-read floor {r['weight_read_floor_us']:.0f} us = {r['ours']['floor_frac']:.2f} of ours")  # fmt: skip
        anchors = " ".join(f"{k}={v:.2f}" for k, v in r["ratios_ours_vs_anchor"].items())
        print(f"{'  vs anchors.md (H200) ':<34} {'':>9} {'':>8} {'':>5}  {anchors}")
    for name, r in res["linear_bias_gelu"].items():
        vs = " ".join(f"{k}={v:.2f}" for k, v in r["ratios_ours_vs"].items())
        print(f"{'linear_bias_gelu ' + name:<34} {r['ours']['us']:>9.1f} {r['ours']['tflops']:>8.0f} {r['ours']['ceiling_frac']:>5.2f}  {vs}")
        oe = r["ours_exact"]
        print(f"{'  exact GELU ' + name:<34} {oe['us']:>9.1f} {oe['tflops']:>8.0f} {oe['ceiling_frac']:>5.2f}  "
              + " ".join(f"{k}={v:.2f}" for k, v in r["ratios_ours_exact_vs"].items()))  # fmt: skip
    t = res["training_blog"]
    for kk in modes:
        vs = " ".join(f"{a}={t[a]['us'] / t[kk]['us']:.2f}" for a in ("eager", "compile", "liger") if a in t)
        print(f"{'train blog ' + kk:<34} {t[kk]['us']:>9.1f} {t[kk]['tflops']:>8.0f} {t[kk]['ceiling_frac']:>5.2f}  {vs}")

    out_dir = REPO / "benchmarks" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"mlp_{device_short(props.name)}.json"]
    if os.environ.get("OUT"):
        Path(os.environ["OUT"]).mkdir(parents=True, exist_ok=True)
        paths.append(Path(os.environ["OUT"]) / "mlp_bench.json")
    for p in paths:
        p.write_text(json.dumps(res, indent=1) + "\n")
        print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
