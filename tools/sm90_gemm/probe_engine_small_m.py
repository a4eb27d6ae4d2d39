"""The GeGLU engine's variants (.sm90dev/libgeglu_gemm_sm90.so) at 33-64 tokens, where the op
runs the engine's pick (pick_config: variant 3 up to 64 tokens), against cuBLAS's GEMM of
the merged [2H, K] weight (no activation): CUDA graphs, medians of 5 interleaved rounds
(check_linear.graph_rounds), at Gemma-2B and Gemma-7B decode widths. A probe for the route
at these token counts, not a test.

    python tools/sm90_gemm/probe_engine_small_m.py [--tokens 33,48,64] [--lib PATH]
"""

from __future__ import annotations

import argparse
import os
import statistics

import torch

from check_and_bench import Lib
from check_linear import graph_rounds
from harness import ROOT, log, log_device

SHAPES = {"gemma2b": (2048, 16384), "gemma7b": (3072, 24576)}  # (K = model width, H = hidden)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", default="33,48,64")
    ap.add_argument("--lib", default=os.path.join(ROOT, ".sm90dev", "libgeglu_gemm_sm90.so"))
    a = ap.parse_args()
    lib = Lib(a.lib)
    log_device()
    bf = torch.bfloat16
    for name, (K, H) in SHAPES.items():
        W = torch.randn(2 * H, K, device="cuda").mul_(K ** -0.5).to(bf)
        wg, wu = W[:H], W[H:]
        for M in (int(t) for t in a.tokens.split(",")):
            x = torch.randn(M, K, device="cuda").to(bf)
            out = torch.empty(M, H, device="cuda", dtype=bf)
            pick = lib.lib.geglu_gemm_sm90_pick_config(M, K, H, 0)
            cands = {"cuBLAS mm (merged, no activation)": lambda: torch.mm(x, W.t())}
            for c in range(lib.num_configs):
                def call(c=c):
                    rc = lib.raw(x.data_ptr(), M, K, K, wg.data_ptr(), wu.data_ptr(), K, None, None,
                                 out.data_ptr(), H, H, 0, 1, c)
                    assert rc == 0, lib.status(rc)
                cands[f"engine {c} {lib.names[c]}{' (pick)' if c == pick else ''}"] = call
            samples = graph_rounds(cands, skip_failures=True)
            log(f"{name} M={M}:")
            for k, v in samples.items():
                log(f"  {k:50s} {statistics.median(v):7.1f} us ({min(v):.1f}-{max(v):.1f})")


if __name__ == "__main__":
    main()
