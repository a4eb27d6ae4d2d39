"""Regenerate the launch table of the Triton gate/up GEMM with the GeGLU epilogue
(torch-ext/geglu/triton_kernels/gemm_configs.py) on a GPU.

    python -m tools.build            # once: build/ must hold the package (torch-cuda variant)
    python tools/tune_gemm.py        # time the candidates, print the choice, rewrite the table
    python tools/tune_gemm.py --dry-run          # print only
    python tools/tune_gemm.py --rows large       # only the buckets whose name contains "large"

For each token bucket of the table, a handful of candidate launch configurations is
timed (triton.testing.do_bench, median, bf16) on that bucket's representative shapes:
the anchor shapes of the project (blog MLP 8192x768->3072, Gemma-7B 4096x3072->24576,
decode 16 tokens) and their 64- / 256-token versions. The winner minimizes the sum
over shapes of time / cuBLAS time for one GEMM of the merged [2*hidden, K] gate/up
weight (which computes no activation), so no shape dominates by size. The rows of
the running GPU's architecture are rewritten between the BEGIN/END TABLE markers;
other architectures' rows stay. After a rewrite, rebuild (`python -m tools.build`) so
the package ships the new table; with OUT set, the rewritten file is also copied to
$OUT/gemm_configs.py (to carry it back from a remote GPU machine).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import os
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
CONFIGS_PY = REPO / "torch-ext" / "geglu" / "triton_kernels" / "gemm_configs.py"


def load_source_configs():
    """gemm_configs.py from the source tree (stdlib only), the file this script rewrites."""
    spec = importlib.util.spec_from_file_location("_geglu_gemm_configs_src", CONFIGS_PY)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load_kernel():
    from kernels import get_kernel

    os.environ["LOCAL_KERNELS"] = f"org/geglu={REPO}"
    return get_kernel("org/geglu", version=1)


# Representative shapes per token bucket: (M tokens, hidden, K inputs).
SHAPES = {
    "large": [(8192, 3072, 768), (4096, 24576, 3072)],
    "m16": [(16, 24576, 3072), (16, 3072, 768)],
    "m64": [(64, 24576, 3072)],
    "m256": [(256, 24576, 3072)],
}


def candidates(C, bucket: str):
    """A small, Hopper-minded candidate set per bucket (TMA ones are dropped where the GPU has no TMA)."""
    if bucket == "large":  # two 128xBN fp32 accumulators: BN=128 is the 128x256 register budget
        return [
            C("tma", 128, 128, 64, 8, 8, 3), C("tma", 128, 128, 64, 8, 8, 4), C("tma", 128, 128, 64, 8, 8, 3, 1, False),
            C("tma", 128, 64, 64, 8, 4, 4), C("tile", 128, 128, 64, 8, 8, 3), C("tile", 128, 64, 64, 8, 4, 4),
            # A 4th stage, the persistent TMA kernel with unflattened loops, and a wider
            # group-M swizzle (16 M tiles per band of weight tiles in L2). The last won
            # the second H100 tune.
            C("tile", 128, 128, 64, 8, 8, 4), C("tma", 128, 128, 64, 8, 8, 4, 1, False),
            C("tile", 128, 128, 64, 16, 8, 3), C("tma", 128, 128, 64, 16, 8, 3, 1, False),
        ]  # fmt: skip
    if bucket == "m16":
        return [
            C("tile", 16, 64, 128, 1, 4, 4, 0), C("tile", 16, 64, 256, 1, 4, 3, 0),
            C("tile", 16, 32, 128, 1, 4, 4, 0), C("tile", 16, 128, 128, 1, 4, 3, 0),
            # Decode reads the weights once: deeper pipelines and wider K steps keep more
            # bytes in flight per SM.
            C("tile", 16, 64, 256, 1, 4, 4, 0), C("tile", 16, 32, 256, 1, 4, 4, 0),
            C("tile", 16, 128, 256, 1, 8, 3, 0), C("tile", 16, 64, 128, 1, 4, 6, 0),
        ]  # fmt: skip
    if bucket == "m64":
        return [C("tile", 64, 64, 128, 1, 4, 4, 0), C("tile", 64, 64, 64, 1, 4, 4, 0), C("tile", 32, 64, 128, 1, 4, 4, 0)]
    return [C("tile", 64, 128, 64, 8, 4, 4, 0), C("tile", 128, 128, 64, 8, 8, 3, 0), C("tma", 128, 128, 64, 8, 8, 3)]


class Problem:
    """Operands of one shape of one bucket, and the launches to time."""

    def __init__(self, tg, m: int, n: int, k: int):
        dt, dev = torch.bfloat16, "cuda"
        self.tg, self.shape = tg, (m, n, k)
        self.x = torch.randn(m, k, device=dev, dtype=dt)
        self.w = torch.randn(2 * n, k, device=dev, dtype=dt) * k**-0.5
        self.flops = 2.0 * m * 2 * n * k

    def run(self, cfg):
        n = self.shape[1]
        return self.tg.geglu_forward(self.x, self.w[:n], self.w[n:], None, None, "tanh", config=cfg)

    def cublas(self):
        return self.x @ self.w.t()


def bench_us(fn) -> float:
    from triton.testing import do_bench

    return do_bench(fn, warmup=10, rep=40, return_mode="median") * 1e3


def format_table(gc, table: dict, tuned: dict) -> str:
    """The BEGIN/END TABLE block, in the layout gemm_configs.py ships."""
    fields = gc.GemmConfig._fields
    defaults = gc.GemmConfig._field_defaults
    lines = [f"TUNED = {tuned!r}  # arch -> how its rows were chosen (written by tools/tune_gemm.py)", "TABLE = {"]
    for arch, rows in table.items():
        if arch == "interpreter":
            lines.append("    # TRITON_INTERPRET=1 (CPU tests): tiny tiles; small M forces split-K and 64 < M <= 256")
            lines.append("    # the TMA kernel, so every code path runs on CPU at small sizes.")
        lines.append(f'    "{arch}": {{')
        for bucket, cfg in rows.items():
            values = list(cfg)
            while len(values) > 7 and values[-1] == defaults[fields[len(values) - 1]]:
                values.pop()  # trailing defaults left out, as written by hand
            args = ", ".join(f'"{v}"' if isinstance(v, str) else repr(v) for v in values)
            lines.append(f'        "{bucket}": C({args}),')
        lines.append("    },")
    lines.append("}")
    return "\n".join(lines) + "\n"


def rewrite_table(gc, table: dict, tuned: dict) -> None:
    src = CONFIGS_PY.read_text()
    begin = src.index("# BEGIN TABLE")
    begin = src.index("\n", begin) + 1
    end = src.index("# END TABLE")
    CONFIGS_PY.write_text(src[:begin] + format_table(gc, table, tuned) + src[end:])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry-run", action="store_true", help="print the choice, do not rewrite gemm_configs.py")
    ap.add_argument("--rows", default="", help="only buckets whose name contains this text")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("tune_gemm: needs a CUDA GPU", file=sys.stderr)
        return 2

    import triton

    t_start = time.time()
    kernel = load_kernel()
    tg = kernel.triton_kernels.gemm
    gc = load_source_configs()
    C = tg.GemmConfig
    dev = tg._device_info(torch.device("cuda"))
    arch = dev.arch
    props = torch.cuda.get_device_properties(0)
    print(f"{props.name} (sm {props.major}.{props.minor}, table row {arch!r}), triton {triton.__version__}, "
          f"torch {torch.__version__}", flush=True)  # fmt: skip
    table = {a: dict(rows) for a, rows in gc.TABLE.items()}
    tuned_rows = table.setdefault(arch, dict(gc.TABLE["9.0"]))
    summary = []
    for bucket, shapes in SHAPES.items():
        if args.rows not in bucket:
            continue
        problems = [Problem(tg, *s) for s in shapes]
        refs = [bench_us(p.cublas) for p in problems]
        cands = [c for c in candidates(C, bucket) if c.kernel != "tma" or dev.tma]
        current = tuned_rows[bucket]
        if current not in cands:
            cands.append(current)
        results = []
        for cfg in cands:
            try:
                for p in problems:
                    p.run(cfg)  # compile (and check it launches)
                times = [bench_us(lambda p=p: p.run(cfg)) for p in problems]
            except Exception as e:  # noqa: BLE001 - a candidate this GPU/compiler cannot run
                print(f"  {bucket} {tuple(cfg)}: skipped ({type(e).__name__}: {str(e)[:80]})", flush=True)
                continue
            score = sum(t / r for t, r in zip(times, refs))
            results.append((score, cfg, times))
            print(f"  {bucket} {tuple(cfg)}: " + ", ".join(f"{t:.1f}us" for t in times)
                  + f"  (x{score / len(times):.3f} of cuBLAS)", flush=True)  # fmt: skip
        if not results:
            continue
        score, best, times = min(results, key=lambda r: r[0])
        tuned_rows[bucket] = best
        for p, t, r in zip(problems, times, refs):
            summary.append((bucket, p.shape, best, t, r, p.flops / (t * 1e-6) / 1e12))
        del problems
        torch.cuda.empty_cache()

    print(f"\nchosen launch configs ({time.time() - t_start:.0f} s):")
    print(f"{'row':<12} {'M x N x K':<20} {'config':<48} {'us':>8} {'cuBLAS':>8} {'TFLOP/s':>8}")
    for row, (m, n, k), cfg, t, r, tf in summary:
        print(f"{row:<12} {f'{m}x{n}x{k}':<20} {str(tuple(cfg)):<48} {t:>8.1f} {r:>8.1f} {tf:>8.0f}")
    if args.dry_run or not summary:
        return 0
    tuned = dict(gc.TUNED)
    tuned[arch] = f"{props.name}, triton {triton.__version__}, {datetime.date.today().isoformat()}"
    rewrite_table(gc, table, tuned)
    print(f"\nrewrote {CONFIGS_PY.relative_to(REPO)} (rows of {arch!r}); rebuild with `python -m tools.build`")
    if os.environ.get("OUT"):  # the device machine returns only $OUT: bring the table back from there
        out = Path(os.environ["OUT"]) / "gemm_configs.py"
        out.write_text(CONFIGS_PY.read_text())
        print(f"copied to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
