"""Check and time the prefill down-projection experiment (tools/sm90_gemm/linear_down_sm90.cu,
built alone into .sm90dev/liblinear_down_sm90.so by build_lib.sh) against cuBLAS: what
`_geglu_mlp` runs today for the down GEMM (`addmm(residual, h, w.T)` without a bias,
`F.linear(h, w, b)` with one, `F.linear` alone without either).

Correctness: float64 reference on fresh random inputs, outputs poisoned with NaN, every
variant, with / without bias and residual, odd shapes and padded strides. Timing: CUDA
graphs of 20 calls, median of 5 interleaved rounds, bf16.

    python tools/sm90_gemm/check_linear_down.py [--out DIR]
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
from check_linear import graph_rounds  # noqa: E402
from harness import ROOT, log, save_results  # noqa: E402

# (tokens, hidden = K, out = N): the MLPs' down projections at prefill
SHAPES = {"blog_8192": (8192, 3072, 768), "gemma2b_4096": (4096, 16384, 2048), "gemma7b_4096": (4096, 24576, 3072)}


class LinearDown:
    def __init__(self, path):
        L = self.L = ctypes.CDLL(path)
        i64, vp, ci = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int
        L.linear_down_sm90.argtypes = [vp, i64, i64, i64, vp, i64, i64, vp, vp, i64, vp, i64, ci, vp]
        L.linear_down_sm90.restype = ci
        L.linear_down_sm90_config_name.argtypes = [ci]
        L.linear_down_sm90_config_name.restype = ctypes.c_char_p
        self.n = L.linear_down_sm90_num_configs()
        self.names = [L.linear_down_sm90_config_name(i).decode() for i in range(self.n)]

    def __call__(self, x, w, bias, residual, out, config):
        M, K = x.shape
        N = w.shape[0]
        return self.L.linear_down_sm90(
            x.data_ptr(), M, K, x.stride(0), w.data_ptr(), N, w.stride(0),
            bias.data_ptr() if bias is not None else None,
            residual.data_ptr() if residual is not None else None, residual.stride(0) if residual is not None else 0,
            out.data_ptr(), out.stride(0), config, torch.cuda.current_stream().cuda_stream)


def check(lib) -> int:
    g = torch.Generator(device="cuda").manual_seed(0)
    fails = n = 0
    for M, K, N in [(1, 64, 64), (7, 136, 200), (300, 520, 136), (1000, 1000, 1000), (4096, 3072, 768)]:
        for cfg in range(lib.n):
            for with_bias in (False, True):
                for with_res in (False, True):
                    pad = 8 if (M + K + N) % 2 else 0  # padded row strides on some cases
                    r = lambda *s: torch.randn(*s, device="cuda", generator=g)  # noqa: E731
                    x = r(M, K + pad)[:, :K].bfloat16()
                    w = (r(N, K + pad)[:, :K] * K**-0.5).bfloat16()
                    b = r(N).bfloat16() if with_bias else None
                    res = r(M, N + pad)[:, :N].bfloat16() if with_res else None
                    out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
                    st = lib(x, w, b, res, out, cfg)
                    ref = x.double() @ w.double().T
                    if b is not None:
                        ref = ref + b.double()
                    if res is not None:
                        ref = ref + res.double()
                    err = (out.double() - ref).abs().max().item() if st == 0 else float("inf")
                    ok = st == 0 and err <= 2e-2 * max(ref.abs().max().item(), 1.0)
                    n += 1
                    if not ok:
                        fails += 1
                        log(f"FAIL {lib.names[cfg]} M{M} K{K} N{N} bias={with_bias} res={with_res}: status {st}, err {err:.3g}")
    log(f"checks: {n - fails}/{n} pass")
    return fails


def bench(lib, rounds=5) -> dict:
    results = {}
    g = torch.Generator(device="cuda").manual_seed(1)
    for name, (M, K, N) in SHAPES.items():
        r = lambda *s: torch.randn(*s, device="cuda", generator=g, dtype=torch.bfloat16)  # noqa: E731
        h, w, b, res = r(M, K), r(N, K) * K**-0.5, r(N), r(M, N)
        out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        flops = 2 * M * N * K
        for case, bias, resid in (("residual", None, res), ("bias", b, None), ("plain", None, None)):
            fns = {}
            if resid is not None:
                fns["cublas addmm(res)"] = lambda: torch.addmm(res, h, w.t())
            elif bias is not None:
                fns["cublas F.linear(b)"] = lambda: F.linear(h, w, b)
            else:
                fns["cublas F.linear"] = lambda: F.linear(h, w)
            for cfg in range(lib.n):
                if lib(h, w, bias, resid, out, cfg) != 0:
                    continue
                fns[lib.names[cfg]] = (lambda cfg=cfg, bias=bias, resid=resid: lib(h, w, bias, resid, out, cfg))
            times = graph_rounds(fns, rounds)
            med = {k: statistics.median(v) for k, v in times.items()}
            base = next(iter(med.values()))
            log(f"{name} {M}x{K}->{N} {case}:")
            for k, v in med.items():
                log(f"  {k:28s} {v:8.1f} us  {flops / v / 1e6:6.0f} TFLOP/s  {base / v:5.3f}x cuBLAS")
            results[f"{name}/{case}"] = {"median_us": med, "rounds_us": times}
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=".")
    ap.add_argument("--lib", default=os.path.join(ROOT, ".sm90dev", "liblinear_down_sm90.so"))
    args = ap.parse_args()
    lib = LinearDown(args.lib)
    log(f"{torch.cuda.get_device_name()} torch {torch.__version__} {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
    log(f"variants: {lib.names}")
    fails = check(lib)
    results = bench(lib)
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    save_results(args.out, "linear_down_sm90_h100", {**meta, "results": results})
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
