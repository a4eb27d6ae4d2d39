"""Check and time the decode linear (geglu_kernels/cuda/sm90/decode/decode_sm90.cu, built as
.sm90dev/libdecode_sm90.so by `build_lib.sh geglu_kernels/cuda/sm90/decode/decode_sm90.cu
libdecode_sm90`): the MLP's down projection at 1-4 tokens against cuBLAS's addmm, at a
GeGLU MLP's decode shapes.

Correctness: float64 reference on fresh random inputs, outputs poisoned with NaN,
M = 1..4 over odd (multiple-of-8) K and any output width, a bias, a residual, padded
strides; the refusals; CUDA-graph replay with new inputs.
Timing: each candidate captured 20 times in a CUDA graph and replayed, medians of 5
interleaved rounds, weights larger than L2 (every call reads them from HBM), against
the measured read bandwidth. `--lib-b` adds the decode rows again from a second build,
interleaved with the first (the A/B comparisons of docs/DESIGN.md). DECODE_SHAPES and
DECODE_TOKENS (comma lists) narrow the grid.
(The gate/up decode kernel of the same design, replaced by the swap-AB CUTLASS kernel,
and this script's checks and rows for it: commit e20bd53. The experiments the kernels
were cut from: commit 0b9f914, register-fed variants with a split-K down projection;
509f929, register-fed kernels against bulk-copy rings; 94b5fe8, persistent grids.)

    python tools/sm90_gemm/check_decode.py [--out DIR] [--no-bench] [--lib-b PATH]
"""

from __future__ import annotations

import argparse
import ctypes
import os

import torch

from harness import (ROOT, check_linear_case, decode_grid, graph_rounds, log, log_device, log_rows,
                     read_bandwidth, rel_err, save_results)

DT = {torch.bfloat16: 0, torch.float16: 1}


class Decode:
    def __init__(self, path):
        L = self.L = ctypes.CDLL(path)
        i64, vp, ci = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int
        L.geglu_decode_sm90_linear.argtypes = [vp, i64, i64, i64, vp, i64, vp, vp, i64, vp, i64, i64, ci, vp]

    def linear(self, x, w, out, bias=None, residual=None):
        s = torch.cuda.current_stream().cuda_stream
        p = lambda t: None if t is None else t.data_ptr()  # noqa: E731
        return self.L.geglu_decode_sm90_linear(
            x.data_ptr(), x.shape[0], x.shape[1], x.stride(0), w.data_ptr(), w.stride(0), p(bias), p(residual),
            0 if residual is None else residual.stride(0), out.data_ptr(), w.shape[0], out.stride(0), DT[x.dtype], s)


def check(dec):
    fails = n = 0
    tol = {torch.bfloat16: 1.2e-2, torch.float16: 2e-3}
    # The linear's token limit (GEGLU_DECODE_LINEAR_MAX_M): the largest M it accepts.
    t = torch.randn(8, 64, device="cuda", dtype=torch.bfloat16)
    max_m = max(m for m in range(1, 9) if dec.linear(t[:m], t, torch.empty_like(t[:m])) == 0)
    log(f"linear: up to {max_m} tokens")
    n += 1
    if max_m != 4:
        fails += 1
        log(f"  FAIL: linear accepts up to {max_m} tokens (4 expected)")
    for dtype in (torch.bfloat16, torch.float16):
        for M in range(1, max_m + 1):
            for K, N in ((8, 8), (24, 9), (72, 24), (520, 41), (2056, 1000), (4104, 136), (16392, 300)):
                for pad in (0, 8):
                    rc, e = check_linear_case(dec.linear, M, K, N, pad, dtype)
                    n += 1
                    if not e <= tol[dtype]:
                        fails += 1
                        log(f"  FAIL linear {dtype} M={M} K={K} N={N} pad={pad}: rc={rc} err={e:.3g}")
    # Refusals: M over the limit (4), K not a multiple of 8, a row stride that is not.
    x = torch.randn(5, 64, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    o = torch.empty(5, 64, device="cuda", dtype=torch.bfloat16)
    for what, rc in (("M=5", dec.linear(x, w, o)), ("K=60", dec.linear(x[:4, :60], w[:, :60], o[:4])),
                     ("ldx=65", dec.linear(x.view(-1)[: 4 * 65].view(4, 65)[:, :64], w, o[:4]))):
        n += 1
        if rc == 0:
            fails += 1
            log(f"  FAIL: {what} was accepted")
    # Graph replay with new inputs.
    M, K, N = 4, 8192, 2048
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, K, device="cuda").mul_(K ** -0.5).to(torch.bfloat16)
    r = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
    y = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    dec.linear(x, w, y, residual=r)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        dec.linear(x, w, y, residual=r)
    x.copy_(torch.randn_like(x))
    y.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    n += 1
    e = rel_err(y, x.double() @ w.double().t() + r.double())
    if not e <= 1.2e-2:
        fails += 1
        log(f"  FAIL graph replay: err={e:.3g}")
    log(f"checks: {n - fails}/{n} passed")
    return fails


def bench(dec, dec_b=None):
    res = {}
    bw_read = read_bandwidth()
    res["bw_read"] = bw_read
    bf = torch.bfloat16
    shapes, token_counts = decode_grid("DECODE", "1,2,4")
    for name, d, H in shapes:
        wd = torch.randn(d, H, device="cuda").mul_(H ** -0.5).to(bf)
        for M in token_counts:
            hh = torch.randn(M, H, device="cuda").to(bf)
            r = torch.randn(M, d, device="cuda").to(bf)
            yy = torch.empty(M, d, device="cuda", dtype=bf)
            cands = {
                "down cuBLAS addmm": lambda: torch.addmm(r, hh, wd.t()),
                "down decode linear": lambda: dec.linear(hh, wd, yy, residual=r),
            }
            if dec_b is not None:  # the same row with the --lib-b build, interleaved with the first
                cands["down decode linear [B]"] = lambda: dec_b.linear(hh, wd, yy, residual=r)
            samples = graph_rounds(cands)
            floor = d * H * 2 / bw_read * 1e6
            log(f"{name} M={M}: read-bandwidth floor {floor:.1f} us")
            log_rows(f"{name} M={M}", samples, lambda k: floor, res, width=28)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--no-bench", action="store_true")
    ap.add_argument("--lib", default=os.path.join(ROOT, ".sm90dev", "libdecode_sm90.so"))
    ap.add_argument("--lib-b", help="a second build of the decode linear, timed beside --lib")
    a = ap.parse_args()
    dec = Decode(a.lib)
    log_device()
    fails = check(dec)
    res = {} if a.no_bench else bench(dec, Decode(a.lib_b) if a.lib_b else None)
    save_results(a.out, "check_decode", res)
    raise SystemExit(1 if fails else 0)


if __name__ == "__main__":
    main()
