"""Check and time the bias + GELU linear for Hopper (geglu_kernels/cuda/sm90/bf16/linear_gelu_sm90.cu,
built alone into .sm90dev/liblinear_gelu_sm90.so by build_lib.sh, see its header) against
cuBLAS(Lt): torch._addmm_activation (tanh GELU in cuBLASLt's epilogue), F.linear + F.gelu
(exact GELU: a second pass) and F.linear alone (no activation: what the GEMM costs).

Correctness: float64 reference on fresh random inputs, outputs poisoned with NaN, the
kernel, tanh / exact, with / without bias, odd shapes and padded strides. Timing: CUDA
graphs of 20 calls, median of 5 interleaved rounds.

    python tools/sm90_gemm/check_linear_gelu.py [--out DIR] [--lib OTHER.so]

To compare two builds, run it once per --lib, alternating (two builds' .so files in one
process, each with its own static cudart, broke the CUDA-graph capture of the timing).
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import os
import statistics
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import ROOT, graph_rounds, log, save_results  # noqa: E402

SHAPES = {"bert_large": (8192, 1024, 4096), "gpt2_xl": (8192, 1600, 6400), "bert_large_m64": (64, 1024, 4096),
          "t5_xl_ff": (4096, 2048, 5120)}


class LinearGelu:
    def __init__(self, path):
        L = self.L = ctypes.CDLL(path)
        i64, vp, ci = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int
        L.linear_gelu_sm90.argtypes = [vp, i64, i64, i64, vp, i64, i64, vp, vp, i64, ci, ci, vp]
        L.linear_gelu_sm90.restype = ci
        # The product's ABI has one kernel and no config; a tile sweep builds its own
        # variants (the README's "The other Hopper GEMMs here").
        self.n = 1
        self.names = ["pingpong_128x128x64_c2"]

    def __call__(self, x, w, bias, out, tanh, config=-1):
        del config  # one kernel
        M, K = x.shape
        N = w.shape[0]
        return self.L.linear_gelu_sm90(x.data_ptr(), M, K, x.stride(0), w.data_ptr(), N, w.stride(0),
                                       bias.data_ptr() if bias is not None else None, out.data_ptr(), out.stride(0),
                                       0 if x.dtype == torch.bfloat16 else 1, int(tanh),
                                       torch.cuda.current_stream().cuda_stream)


def check(lib):
    g = torch.Generator(device="cuda").manual_seed(0)
    fails = n = 0
    cases = [(1, 64, 64), (7, 136, 200), (64, 1024, 4096), (300, 520, 136), (1000, 1000, 1000), (129, 1600, 6400),
             (8192, 1024, 4096)]
    for i, (M, K, N) in enumerate(cases):
        for cfg in [-1] + list(range(lib.n)):
            for tanh in (True, False):
                bias_on, pad = (i + cfg) % 2 == 0, 8 * (i % 2)
                x = (torch.randn(M, K + pad, device="cuda", generator=g)).to(torch.bfloat16)[:, :K]
                w = (torch.randn(N, K, device="cuda", generator=g) / K ** 0.5).to(torch.bfloat16)
                b = torch.randn(N, device="cuda", generator=g).to(torch.bfloat16) if bias_on else None
                of = torch.full((M, N + pad), float("nan"), device="cuda", dtype=torch.bfloat16)
                out = of[:, :N]
                rc = lib(x, w, b, out, tanh, cfg)
                torch.cuda.synchronize()
                ok = rc == 0
                rel = float("nan")
                if ok:
                    ref = x.double() @ w.double().t()
                    if b is not None:
                        ref += b.double()
                    ref = F.gelu(ref, approximate="tanh" if tanh else "none")
                    rel = float((out.double() - ref).norm() / ref.norm())
                    ok = rel < 8e-3 and (pad == 0 or bool(of[:, N:].isnan().all()))
                n += 1
                fails += not ok
                if not ok or M == 8192:
                    log(f"  check M={M} K={K} N={N} cfg={cfg} tanh={tanh} bias={bias_on} pad={pad}: "
                        f"{'ok' if ok else 'FAIL'} rc={rc} rel={rel:.2e}")
    log(f"checks: {n - fails}/{n} passed")
    return fails


def bench(lib):
    res = {}
    bf = torch.bfloat16
    for name, (M, K, N) in SHAPES.items():
        x = torch.randn(M, K, device="cuda").to(bf)
        w = (torch.randn(N, K, device="cuda") / K ** 0.5).to(bf)
        b = torch.randn(N, device="cuda").to(bf)
        out = torch.empty(M, N, device="cuda", dtype=bf)
        cands = {
            "cuBLAS F.linear (no GELU)": lambda: F.linear(x, w, b),
            "tanh cuBLASLt _addmm_activation": lambda: torch._addmm_activation(b, x, w.t(), use_gelu=True),
            "exact F.linear + F.gelu": lambda: F.gelu(F.linear(x, w, b)),
        }
        for c in range(lib.n):
            for tanh in (True, False):
                cands[f"{'tanh' if tanh else 'exact'} ours {lib.names[c]}"] = (
                    lambda c=c, tanh=tanh: lib(x, w, b, out, tanh, c))
        for tanh in (True, False):
            cands[f"{'tanh' if tanh else 'exact'} ours auto"] = (lambda tanh=tanh: lib(x, w, b, out, tanh, -1))
        samples = graph_rounds(cands)
        flops = 2 * M * N * K
        log(f"{name} M={M} K={K} N={N}")
        for k, v in samples.items():
            med = statistics.median(v)
            log(f"  {k:42s} {med:8.1f} us ({min(v):.1f}-{max(v):.1f})  {flops / med / 1e6:6.0f} TF/s")
            res[f"{name} {k}"] = med
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--lib", default=os.path.join(ROOT, ".sm90dev", "liblinear_gelu_sm90.so"))
    a = ap.parse_args()
    lib = LinearGelu(a.lib)
    log(f"{datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC, {torch.cuda.get_device_name()}, torch {torch.__version__}")
    fails = check(lib)
    res = bench(lib)
    card = "h200" if "H200" in torch.cuda.get_device_name() else "h100"  # the lent cards; named for the results
    save_results(a.out, f"linear_gelu_sm90_{card}", res)
    raise SystemExit(1 if fails else 0)


if __name__ == "__main__":
    main()
