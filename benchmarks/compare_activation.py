"""Elementwise GeGLU, gelu_tanh(gate) * up, forward and backward on the GPU: geglu's
kernels side by side with what users would run instead, in one process, on the same
inputs, at the MLP shapes of SHAPES below (bf16): blog, Gemma-2B, Gemma-7B, and
Gemma-7B's hidden at 16 tokens (decode).

Forward rows:   eager (F.gelu(g, approximate="tanh") * u, 2 kernels), torch.compile of
                it (dynamic=False), Liger (LigerGELUMulFunction), geglu native
                (ops.geglu, the compiled CUDA kernel), geglu Triton (ops._geglu_triton).
Backward rows:  eager autograd, torch.compile autograd, Liger backward, geglu native
                (ops.geglu_backward), geglu Triton (ops._geglu_backward_triton).
Ceiling:        a large device-to-device copy (bytes read + written per second).

Times are medians of triton.testing.do_bench (L2 flushed between runs). Per row: us,
GB/s (forward moves 3 tensors, backward 5), the fraction of copy bandwidth, and the
speedup over eager / torch.compile / Liger. Every row's result is checked against a
float32 reference first. Rows whose library is missing are reported as skipped.

    python benchmarks/compare_activation.py [--shapes blog decode] [--no-compile]
    python benchmarks/compare_activation.py --device cpu --tiny --no-compile  # smoke test

The kernel is loaded as users load it, kernels.get_kernel("org/geglu", version=1),
with LOCAL_KERNELS pointing at this checkout (build/ from `python -m tools.build`).
Prints a table last; JSON to $OUT/activation_bench.json (when OUT is set) and
benchmarks/results/activation_<device>.json, a plot beside it (.png) if matplotlib
is importable.
"""

import argparse
import datetime
import json
import os
import sys
import traceback
from pathlib import Path

import torch
import torch._dynamo
import torch.nn.functional as F

REPO = Path(__file__).resolve().parent.parent
REPO_ID = "org/geglu"
DTYPE = torch.bfloat16

# name: (tokens, hidden) of the [tokens, hidden] gate/up tensors; compare_mlp.py's MLP shapes.
SHAPES = {
    "blog": (8192, 3072),
    "gemma2b": (4096, 16384),
    "gemma7b": (4096, 24576),
    "decode": (16, 24576),
}
TINY_SHAPES = {"tiny": (64, 1000), "tiny_decode": (2, 4096)}
FORWARD_ROWS = ["eager", "torch.compile", "liger", "geglu native", "geglu triton"]
BACKWARD_ROWS = ["eager", "torch.compile", "liger", "geglu native", "geglu triton"]
BASELINES = ["eager", "torch.compile", "liger"]


def log(msg: str) -> None:
    print(f"[activation] {msg}", flush=True)


def device_name(device: str) -> str:
    return torch.cuda.get_device_name() if device == "cuda" else "cpu"


def device_short(device: str) -> str:
    if device != "cuda":
        return "cpu"
    name = torch.cuda.get_device_name().lower().replace("nvidia", "").split()
    return name[0] if name else "gpu"


def load_kernel(device: str):
    from kernels import get_kernel

    os.environ["LOCAL_KERNELS"] = f"{REPO_ID}={REPO}"
    kernel = get_kernel(REPO_ID, version=1)
    ops = kernel._ops.ops
    variant = Path(kernel.__file__).parent.name
    key = "CUDA" if device == "cuda" else "CPU"
    native = hasattr(ops, "geglu") and torch._C._dispatch_has_kernel_for_dispatch_key(ops.geglu.default.name(), key)
    log(f"loaded {REPO_ID} variant {variant} ({'with' if native else 'without'} compiled {key} ops), "
        f"Triton ops: {hasattr(ops, '_geglu_triton')}")
    return kernel, ops, variant, native


def bench_us(fn, rep: int, device: str) -> float:
    """Median microseconds of fn(): triton's do_bench on a GPU, a wall clock otherwise."""
    if device == "cuda":
        from triton.testing import do_bench

        return do_bench(fn, warmup=25, rep=rep, return_mode="median") * 1e3
    import statistics
    import time

    fn()
    times = []
    for _ in range(10):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def copy_ceiling_tbps(rep: int, device: str) -> float:
    n = (1 << 30) if device == "cuda" else (1 << 26)
    a = torch.empty(n, dtype=torch.uint8, device=device)
    b = torch.empty_like(a)
    us = bench_us(lambda: b.copy_(a), rep, device)
    del a, b
    if device == "cuda":
        torch.cuda.empty_cache()
    return 2 * n / (us * 1e-6) / 1e12


def rel_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return ((actual.float() - expected).norm() / expected.norm()).item()


# --------------------------------------------------------------------------- rows


def eager_geglu(g, u):
    return F.gelu(g, approximate="tanh") * u


def forward_fns(ops, native: bool, liger, compiled):
    """name -> zero-argument-friendly callable (g, u) -> out, or a reason it is skipped."""
    fns = {"eager": eager_geglu, "torch.compile": compiled or "disabled (--no-compile)"}
    fns["liger"] = (lambda g, u: liger.apply(g, u)) if liger else "liger_kernel not importable"
    fns["geglu native"] = (lambda g, u: ops.geglu(g, u, "tanh")) if native else "no compiled CUDA ops loaded"
    fns["geglu triton"] = (
        (lambda g, u: ops._geglu_triton(g, u, "tanh")) if hasattr(ops, "_geglu_triton") else "op _geglu_triton missing"
    )
    return fns


def autograd_backward(forward):
    """(g, u, dy) -> (dg, du) through autograd of `forward`; the graph is built once per
    input set and reused (retain_graph), so only the backward kernels are timed."""
    cache = {}

    def run(g, u, dy):
        key = (g.data_ptr(), u.data_ptr())
        if key not in cache:
            gr, ur = g.detach().clone().requires_grad_(), u.detach().clone().requires_grad_()
            cache.clear()
            cache[key] = (gr, ur, forward(gr, ur))
        gr, ur, y = cache[key]
        return torch.autograd.grad(y, (gr, ur), dy, retain_graph=True)

    return run


def backward_fns(ops, native: bool, liger, compiled):
    fns = {
        "eager": autograd_backward(eager_geglu),
        "torch.compile": autograd_backward(compiled) if compiled else "disabled (--no-compile)",
    }
    # Liger's backward writes the gradients into its saved inputs: the clones made by
    # autograd_backward absorb that (timing is unaffected by the values).
    fns["liger"] = autograd_backward(lambda g, u: liger.apply(g, u)) if liger else "liger_kernel not importable"
    fns["geglu native"] = (
        (lambda g, u, dy: ops.geglu_backward(dy, g, u, "tanh")) if native else "no compiled CUDA ops loaded"
    )
    fns["geglu triton"] = (
        (lambda g, u, dy: ops._geglu_backward_triton(dy, g, u, "tanh"))
        if hasattr(ops, "_geglu_backward_triton")
        else "op _geglu_backward_triton missing"
    )
    return fns


def reference(g, u, dy):
    gf, uf, dyf = g.float(), u.float(), dy.float()
    x = gf.detach().requires_grad_()
    y = F.gelu(x, approximate="tanh")
    (dgelu,) = torch.autograd.grad(y, x, torch.ones_like(y))
    y = y.detach()
    return y * uf, dyf * uf * dgelu, dyf * y


def measure(fn, args, check, bytes_moved, ceiling, rep, device) -> dict:
    if isinstance(fn, str):
        return {"skipped": fn}
    try:
        err = check(fn(*args))
        if err > 1e-2:
            return {"skipped": f"wrong result (relative error {err:.2e})", "rel_error": err}
        us = bench_us(lambda: fn(*args), rep, device)
    except Exception as e:  # a row that cannot run is reported, not fatal
        traceback.print_exc()
        return {"skipped": f"{type(e).__name__}: {e}"[:300]}
    gbps = bytes_moved / (us * 1e-6) / 1e9
    return {"us": us, "GBps": gbps, "frac_copy": gbps / (ceiling * 1e3), "rel_error": err}


def add_speedups(rows: dict) -> None:
    for r in rows.values():
        if "us" not in r:
            continue
        for base in BASELINES:
            if "us" in rows.get(base, {}):
                r[f"speedup_vs_{base}"] = rows[base]["us"] / r["us"]


def run_shape(name, shape, ops, native, liger, compile_enabled, ceiling, rep, device) -> dict:
    tokens, hidden = shape
    gen = torch.Generator(device=device).manual_seed(0)
    g = torch.randn(shape, generator=gen, device=device, dtype=DTYPE)
    u = torch.randn(shape, generator=gen, device=device, dtype=DTYPE)
    dy = torch.randn(shape, generator=gen, device=device, dtype=DTYPE)
    ref_out, ref_dg, ref_du = reference(g, u, dy)
    elem = tokens * hidden * g.element_size()
    compiled = torch.compile(eager_geglu, dynamic=False) if compile_enabled else None

    def check_forward(out):
        return rel_error(out, ref_out)

    def check_backward(grads):
        return max(rel_error(grads[0], ref_dg), rel_error(grads[1], ref_du))

    result = {"shape": list(shape), "forward": {}, "backward": {}}
    for row, fn in forward_fns(ops, native, liger, compiled).items():
        result["forward"][row] = measure(fn, (g, u), check_forward, 3 * elem, ceiling, rep, device)
        log(f"{name} forward  {row:<14} {fmt(result['forward'][row])}")
    for row, fn in backward_fns(ops, native, liger, compiled).items():
        result["backward"][row] = measure(fn, (g, u, dy), check_backward, 5 * elem, ceiling, rep, device)
        log(f"{name} backward {row:<14} {fmt(result['backward'][row])}")
    add_speedups(result["forward"])
    add_speedups(result["backward"])
    return result


def fmt(r: dict) -> str:
    if "us" not in r:
        return f"skipped: {r['skipped']}"
    return f"{r['us']:8.1f} us {r['GBps']:7.0f} GB/s {100 * r['frac_copy']:5.1f}% of copy"


# --------------------------------------------------------------------------- report


def print_table(res: dict) -> None:
    print()
    print(f"GeGLU (gelu_tanh(g) * u), bf16, {res['device']}, copy ceiling {res['copy_TBps']:.2f} TB/s; "
          f"variant {res['variant']}")
    head = f"{'shape':<22} {'pass':<8} {'row':<14} {'us':>8} {'GB/s':>7} {'%copy':>6} " + " ".join(
        f"{'x' + b:>14}" for b in BASELINES
    )
    print(head)
    print("-" * len(head))
    for name, r in res["shapes"].items():
        label = f"{name} {r['shape'][0]}x{r['shape'][1]}"
        for direction in ("forward", "backward"):
            for row, m in r[direction].items():
                if "us" not in m:
                    print(f"{label:<22} {direction:<8} {row:<14} {'-':>8}  ({m['skipped'][:60]})")
                    continue
                speedups = " ".join(
                    f"{m[f'speedup_vs_{b}']:>14.2f}" if f"speedup_vs_{b}" in m else f"{'-':>14}" for b in BASELINES
                )
                print(f"{label:<22} {direction:<8} {row:<14} {m['us']:>8.1f} {m['GBps']:>7.0f} "
                      f"{100 * m['frac_copy']:>5.1f}% {speedups}")


def plot(res: dict, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib not importable: no plot")
        return
    names = list(res["shapes"])
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5), sharey=True)
    for ax, direction, rows in ((axes[0], "forward", FORWARD_ROWS), (axes[1], "backward", BACKWARD_ROWS)):
        width = 0.8 / len(rows)
        for i, row in enumerate(rows):
            vals = [res["shapes"][n][direction].get(row, {}).get("frac_copy", 0.0) * 100 for n in names]
            ax.bar([k + i * width for k in range(len(names))], vals, width, label=row)
        ax.axhline(100, color="black", linewidth=0.8)
        ax.set_xticks([k + 0.4 - width / 2 for k in range(len(names))])
        ax.set_xticklabels([f"{n}\n{res['shapes'][n]['shape'][0]}x{res['shapes'][n]['shape'][1]}" for n in names])
        ax.set_title(f"GeGLU {direction} (bf16)")
        ax.set_ylabel("% of device copy bandwidth")
    axes[1].legend(fontsize=8)
    fig.suptitle(f"{res['device']}: copy {res['copy_TBps']:.2f} TB/s, torch {res['torch']}, triton {res['triton']}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    log(f"plot: {path}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", nargs="+", choices=list(SHAPES), default=list(SHAPES))
    ap.add_argument("--rep", type=int, default=200, help="do_bench rep (ms of timing per row)")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile rows")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: smoke test of the script")
    ap.add_argument("--tiny", action="store_true", help="small shapes (smoke test)")
    args = ap.parse_args(argv)
    device = args.device
    if device == "cuda" and not torch.cuda.is_available():
        log("needs a CUDA GPU (or --device cpu for a smoke test)")
        return 1
    shapes = TINY_SHAPES if args.tiny else {name: SHAPES[name] for name in args.shapes}
    import triton

    # One code object, compiled per shape and per requires_grad: lift the recompile cap.
    for attr in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, attr):
            setattr(torch._dynamo.config, attr, 64)
    kernel, ops, variant, native = load_kernel(device)
    try:
        from liger_kernel.ops.geglu import LigerGELUMulFunction as liger
    except ImportError as e:
        liger = None
        log(f"Liger rows skipped: {e}")

    ceiling = copy_ceiling_tbps(args.rep, device)
    log(f"device {device_name(device)}: copy {ceiling:.2f} TB/s")
    res = {
        "device": device_name(device),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "variant": variant,
        "dtype": str(DTYPE).replace("torch.", ""),
        "copy_TBps": ceiling,
        "timing": f"triton.testing.do_bench median, rep={args.rep} ms",
        "shapes": {},
    }
    for name, shape in shapes.items():
        res["shapes"][name] = run_shape(name, shape, ops, native, liger, not args.no_compile, ceiling, args.rep, device)
        if device == "cuda":
            torch.cuda.empty_cache()

    text = json.dumps(res, indent=1)
    results_dir = REPO / "benchmarks" / "results"
    results_dir.mkdir(parents=True, exist_ok=True)
    stem = f"activation_{device_short(device)}" + ("_tiny" if args.tiny else "")
    (results_dir / f"{stem}.json").write_text(text + "\n")
    plot(res, results_dir / f"{stem}.png")
    if os.environ.get("OUT"):
        out_dir = Path(os.environ["OUT"])
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "activation_bench.json").write_text(text + "\n")
        plot(res, out_dir / "activation_bench.png")
    print_table(res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
