"""Correctness of the one-dot gate/up kernel (one_dot_gemm.py) against a float64
reference: fresh random inputs, NaN-poisoned outputs, M/N/K ragged against the tiles,
separate and merged weights (up half before or after gate in memory), biases none /
gate / up / both, both GELUs, both ways of building the B tile, with and without
split-K. On CPU it runs under TRITON_INTERPRET=1 (set here before triton loads) with the
local CPU build; on a GPU, with the variant for that torch. Exit status 1 on a miss.

    python tools/triton_one_dot/check_one_dot.py [--build build]
"""

import argparse
import itertools
import os
import sys
from pathlib import Path

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import one_dot_gemm  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"
# |error| / max|reference|: float32 accumulation, one rounding of the output (and TF32
# inputs for float32 on a GPU).
TOL = {torch.float16: 5e-3, torch.bfloat16: 3e-2, torch.float32: 5e-3 if DEV == "cuda" else 1e-4}


def load_product(build: Path):
    """The Triton GEMM module of the loaded variant (the product's two-dot kernel)."""
    from kernels import get_local_kernel

    return get_local_kernel(build).linear.triton_gemm


def operands(m, k, n, dtype, bias, layout, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)

    def rand(*shape, scale=1.0):
        return ((torch.rand(shape, generator=g) * 2 - 1) * scale).to(dtype).to(DEV)

    x = rand(m, k)
    if layout == "separate":
        wg, wu = rand(n, k, scale=k**-0.5), rand(n, k, scale=k**-0.5)
    else:  # views of one [2n, k] weight; "merged-up-first": up rows before gate rows
        w = rand(2 * n, k, scale=k**-0.5)
        wg, wu = (w[:n], w[n:]) if layout == "merged" else (w[n:], w[:n])
    bg = rand(n) if bias in ("gate", "both") else None
    bu = rand(n) if bias in ("up", "both") else None
    return x, wg, wu, bg, bu


def reference(x, wg, wu, bg, bu, approximate):
    d = lambda t: None if t is None else t.double()  # noqa: E731
    return F.gelu(F.linear(d(x), d(wg), d(bg)), approximate=approximate) * F.linear(d(x), d(wu), d(bu))


def check_case(tg, m, k, n, dtype, bias, layout, approximate, b_tile, split_k, seed=0) -> float:
    """Relative error of one call; raises AssertionError past the dtype's tolerance or
    on an element left unwritten."""
    x, wg, wu, bg, bu = operands(m, k, n, dtype, bias, layout, seed)
    cfg = tg.select_config(x, wg, wu)._replace(kernel="tile", split_k=split_k)
    out = torch.full((m, n), float("nan"), device=DEV, dtype=dtype)
    one_dot_gemm.geglu_forward_one_dot(x, wg, wu, bg, bu, approximate, b_tile, config=cfg, out=out)
    ref = reference(x, wg, wu, bg, bu, approximate)
    assert not out.isnan().any(), "an output element was not written"
    err = ((out.double() - ref).abs().max() / ref.abs().max()).item()
    assert err <= TOL[dtype], f"error {err:.2e} > {TOL[dtype]:.0e}"
    return err


# (M, K, N): ragged against every tile of the interpreter's and the GPUs' launch rows.
SHAPES_CPU = [(5, 40, 24), (21, 72, 40), (67, 40, 24)]
SHAPES_GPU = SHAPES_CPU + [(1, 3072, 24576), (16, 2048, 16384), (300, 768, 3072), (1000, 1000, 1000)]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build", help="the folder of the built variants")
    a = ap.parse_args()
    tg = load_product(Path(a.build))
    one_dot_gemm.bind(tg)
    dtypes = [torch.float16, torch.bfloat16] if DEV == "cuda" else [torch.float16, torch.float32]
    shapes = SHAPES_GPU if DEV == "cuda" else SHAPES_CPU
    fails = runs = 0
    for (m, k, n), dtype, b_tile, split_k in itertools.product(shapes, dtypes, ("view", "join"), (1, 2)):
        for bias, layout, approximate in (("none", "separate", "tanh"), ("both", "merged", "none"),
                                          ("gate", "merged-up-first", "tanh"), ("up", "separate", "none")):  # fmt: skip
            runs += 1
            try:
                check_case(tg, m, k, n, dtype, bias, layout, approximate, b_tile, split_k, seed=runs)
            except AssertionError as e:
                fails += 1
                print(f"FAIL M{m} K{k} N{n} {dtype} {b_tile} split{split_k} {bias} {layout} {approximate}: {e}")
    print(f"{runs - fails}/{runs} cases within tolerance on {DEV}")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
