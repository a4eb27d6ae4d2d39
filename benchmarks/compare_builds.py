"""Two builds of this kernel side by side in one process: wall time per call of the
public MLP functions, inference and training, on the same inputs.

    python benchmarks/compare_builds.py BUILD_A BUILD_B [--json OUT]

BUILD_A / BUILD_B are build roots (each holding the variant dirs `kernels` chooses
from, as `build/` does). Written for the stable-ABI port of the CUDA backend
(docs/DESIGN.md, "Stable ABI"): the version-tied build (C++ autograd node, at:: calls)
against the stable-ABI one (autograd registered from Python, C-shim calls). Both load
at once: each build's ops live in their own namespace (`_geglu_cuda_<tree hash>`).

Rows, bf16: `geglu_mlp` inference at decode (host-bound) and prefill sizes, one
training step (forward + backward) from host-bound to GPU-bound sizes, and
`linear_bias_gelu` inference. Per row: wall time per call over `--calls` calls between
two syncs, in `--rounds` interleaved rounds (A, B, A, B, ...); median and spread.
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

# (name, tokens, dim, hidden)
MLP_SHAPES = [
    ("tiny 1 tok 64->256", 1, 64, 256),
    ("Gemma-2B decode 16 tok", 16, 2048, 16384),
    ("blog 8192: 768->3072", 8192, 768, 3072),
    ("Gemma-2B 4096: 2048->16384", 4096, 2048, 16384),
    ("Gemma-7B 4096: 3072->24576", 4096, 3072, 24576),
]
BERT_SHAPES = [("BERT 8192: 1024->4096", 8192, 1024, 4096), ("BERT 64 tok", 64, 1024, 4096)]


def load(root: Path):
    from kernels import get_local_kernel

    return get_local_kernel(root.resolve())


def wall_us(fn, calls: int) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def cases(k, dtype=torch.bfloat16):
    """(row, thunk) per benchmark row for kernel module k; inputs seeded per row, so both
    builds see the same values."""
    out = []
    for name, m, d, h in MLP_SHAPES:
        g = torch.Generator(device="cuda").manual_seed(m * 7 + d)
        r = lambda *s: torch.randn(*s, device="cuda", dtype=dtype, generator=g)  # noqa: E731
        x, wg, wu, wd = r(m, d), r(h, d) * d**-0.5, r(h, d) * d**-0.5, r(d, h) * h**-0.5

        def infer(k=k, x=x, wg=wg, wu=wu, wd=wd):
            with torch.no_grad():
                k.geglu_mlp(x, wg, wu, wd, residual=x)

        xt, wgt, wut, wdt = (t.clone().requires_grad_() for t in (x, wg, wu, wd))
        dy = r(m, d)

        def train(k=k, x=xt, wg=wgt, wu=wut, wd=wdt, dy=dy):
            y = k.geglu_mlp(x, wg, wu, wd, residual=x)
            y.backward(dy)
            for t in (x, wg, wu, wd):
                t.grad = None

        out += [(f"geglu_mlp inference, {name}", infer), (f"geglu_mlp train step, {name}", train)]
    for name, m, d, h in BERT_SHAPES:
        g = torch.Generator(device="cuda").manual_seed(m + d)
        x = torch.randn(m, d, device="cuda", dtype=dtype, generator=g)
        w = torch.randn(h, d, device="cuda", dtype=dtype, generator=g) * d**-0.5
        b = torch.randn(h, device="cuda", dtype=dtype, generator=g)
        for approx in ("tanh", "none"):

            def lbg(k=k, x=x, w=w, b=b, approx=approx):
                with torch.no_grad():
                    k.linear_bias_gelu(x, w, b, approximate=approx)

            out.append((f"linear_bias_gelu {approx}, {name}", lbg))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", type=Path)
    ap.add_argument("b", type=Path)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    builds = {args.a.name: load(args.a), args.b.name: load(args.b)}
    for label, k in builds.items():
        print(f"{label}: {Path(k.__file__).parent} ops {k._ops.add_op_namespace_prefix('*')}")
    rows = {label: cases(k) for label, k in builds.items()}
    names = [n for n, _ in next(iter(rows.values()))]
    times = {label: {n: [] for n in names} for label in builds}
    for i, n in enumerate(names):
        fns = {label: rows[label][i][1] for label in builds}
        for fn in fns.values():  # warm-up: compiles, autotuning, allocator
            for _ in range(3):
                fn()
        calls = max(3, min(args.calls, int(2e5 / max(wall_us(next(iter(fns.values())), 3), 1))))
        for _ in range(args.rounds):
            for label, fn in fns.items():
                times[label][n].append(wall_us(fn, calls))

    la, lb = builds
    print(f"\n{'row':52s} {la:>22s} {lb:>22s}  {lb}/{la}")
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": []}
    for n in names:
        a, b = times[la][n], times[lb][n]
        ma, mb = statistics.median(a), statistics.median(b)
        fmt = lambda v, m: f"{m:9.1f} [{min(v):.1f}-{max(v):.1f}]"  # noqa: E731
        print(f"{n:52s} {fmt(a, ma):>22s} {fmt(b, mb):>22s}  {mb / ma:5.3f}")
        result["rows"].append({"row": n, la: a, lb: b, "median_us": {la: ma, lb: mb}, "ratio": mb / ma})
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
