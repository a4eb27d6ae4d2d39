"""Check and time the decode kernels (geglu_kernels/cuda/decode_sm90.cu, built as
.sm90dev/libdecode_sm90.so by `build_lib.sh geglu_kernels/cuda/decode_sm90.cu
libdecode_sm90`): the gate/up against the GeGLU engine and cuBLAS, the down projection
(the linear) against cuBLAS's addmm, at a GeGLU MLP's decode shapes.

Correctness: float64 reference on fresh random inputs, outputs poisoned with NaN,
M = 1..8 (the linear: 1..4) over odd (multiple-of-8) K and any output width, biases, a
residual, padded strides, a merged weight read in place; the refusals; eager and
CUDA-graph replay of the two kernels in a row, with new inputs.
Timing: each candidate captured 20 times in a CUDA graph and replayed, medians of 5
interleaved rounds, weights larger than L2 (every call reads them from HBM), against
the measured read bandwidth. `--lib-b` adds every decode row again from a second build,
interleaved with the first (the A/B comparisons of docs/DESIGN.md). DECODE_SHAPES and
DECODE_TOKENS (comma lists) narrow the grid.
(The experiments the gate/up kernel was cut from: commit 0b9f914, register-fed variants
with a split-K down projection and unroll / pipelining / row-group knobs; commit
509f929, the register-fed kernel against bulk-copy rings, and probes of the kernel that
runs before. The persistent variant of both kernels: 94b5fe8.)

    python tools/sm90_gemm/check_decode.py [--out DIR] [--no-bench] [--gemm-lib PATH] [--lib-b PATH]
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import os
import statistics

import torch
import torch.nn.functional as F

from check_linear import graph_rounds, graph_time
from harness import ROOT, log, save_results

DT = {torch.bfloat16: 0, torch.float16: 1}


class Decode:
    def __init__(self, path):
        L = self.L = ctypes.CDLL(path)
        i64, vp, ci = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int
        L.geglu_decode_sm90_gate_up.argtypes = [vp, i64, i64, i64, vp, vp, i64, vp, vp, vp, i64, i64, ci, ci, vp]
        L.geglu_decode_sm90_linear.argtypes = [vp, i64, i64, i64, vp, i64, vp, vp, i64, vp, i64, i64, ci, vp]

    def gate_up(self, x, wg, wu, out, bg=None, bu=None, tanh=True):
        s = torch.cuda.current_stream().cuda_stream
        p = lambda t: None if t is None else t.data_ptr()  # noqa: E731
        return self.L.geglu_decode_sm90_gate_up(
            x.data_ptr(), x.shape[0], x.shape[1], x.stride(0), wg.data_ptr(), wu.data_ptr(), wg.stride(0),
            p(bg), p(bu), out.data_ptr(), wg.shape[0], out.stride(0), DT[x.dtype], int(tanh), s)


    def linear(self, x, w, out, bias=None, residual=None):
        s = torch.cuda.current_stream().cuda_stream
        p = lambda t: None if t is None else t.data_ptr()  # noqa: E731
        return self.L.geglu_decode_sm90_linear(
            x.data_ptr(), x.shape[0], x.shape[1], x.stride(0), w.data_ptr(), w.stride(0), p(bias), p(residual),
            0 if residual is None else residual.stride(0), out.data_ptr(), w.shape[0], out.stride(0), DT[x.dtype], s)


def padded(rows, cols, pad, dtype, scale=1.0):
    base = torch.randn(rows, cols + pad, device="cuda", dtype=torch.float32).mul_(scale).to(dtype)
    return base[:, :cols]


def rel_err(y, ref):
    return ((y.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()


def check(dec):
    fails = n = 0
    tol = {torch.bfloat16: 1.2e-2, torch.float16: 2e-3}
    for dtype in (torch.bfloat16, torch.float16):
        for M in range(1, 9):
            for K, H in ((8, 8), (72, 24), (520, 41), (2056, 1000), (4104, 136), (1032, 9000)):
                for pad in (0, 8):
                    x = padded(M, K, pad, dtype)
                    w = padded(2 * H, K, pad, dtype, K ** -0.5)  # merged, gate rows first, read in place
                    wg, wu = w[:H], w[H:]
                    bg = torch.randn(H, device="cuda").to(dtype) if pad else None
                    bu = torch.randn(H, device="cuda").to(dtype) if pad or M % 2 else None
                    for tanh in (True, False):
                        out = torch.full((M, H + pad), float("nan"), device="cuda", dtype=dtype)[:, :H]
                        rc = dec.gate_up(x, wg, wu, out, bg, bu, tanh)
                        g = x.double() @ wg.double().t() + (bg.double() if bg is not None else 0)
                        u = x.double() @ wu.double().t() + (bu.double() if bu is not None else 0)
                        ref = F.gelu(g, approximate="tanh" if tanh else "none") * u
                        n += 1
                        e = rel_err(out, ref) if rc == 0 else float("inf")
                        if not e <= tol[dtype]:
                            fails += 1
                            log(f"  FAIL {dtype} M={M} K={K} H={H} pad={pad} tanh={tanh}: rc={rc} err={e:.3g}")
    # The linear's token limit (GEGLU_DECODE_LINEAR_MAX_M): the largest M it accepts.
    t = torch.randn(8, 64, device="cuda", dtype=torch.bfloat16)
    max_m = max(m for m in range(1, 9) if dec.linear(t[:m], t, torch.empty_like(t[:m])) == 0)
    log(f"linear: up to {max_m} tokens")
    for dtype in (torch.bfloat16, torch.float16):
        for M in range(1, max_m + 1):
            for K, N in ((8, 8), (24, 9), (72, 24), (520, 41), (2056, 1000), (4104, 136), (16392, 300)):
                for pad in (0, 8):
                    x = padded(M, K, pad, dtype)
                    w = padded(N, K, pad, dtype, K ** -0.5)
                    b = torch.randn(N, device="cuda").to(dtype) if pad else None
                    r = padded(M, N, pad, dtype) if pad or M % 2 else None
                    out = torch.full((M, N + pad), float("nan"), device="cuda", dtype=dtype)[:, :N]
                    rc = dec.linear(x, w, out, b, r)
                    ref = x.double() @ w.double().t()
                    ref = ref + (b.double() if b is not None else 0) + (r.double() if r is not None else 0)
                    n += 1
                    e = rel_err(out, ref) if rc == 0 else float("inf")
                    if not e <= tol[dtype]:
                        fails += 1
                        log(f"  FAIL linear {dtype} M={M} K={K} N={N} pad={pad}: rc={rc} err={e:.3g}")
    n += 1
    if max_m != 4:
        fails += 1
        log(f"  FAIL: linear accepts up to {max_m} tokens (4 expected)")
    # The two kernels in a row (the op's MLP), eager and replayed from a graph with new inputs.
    M, K, H = 2, 2048, 8192
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    wg, wu = (torch.randn(H, K, device="cuda").mul_(K ** -0.5).to(torch.bfloat16) for _ in range(2))
    wd = torch.randn(K, H, device="cuda").mul_(H ** -0.5).to(torch.bfloat16)
    h = torch.empty(M, H, device="cuda", dtype=torch.bfloat16)
    y = torch.empty(M, K, device="cuda", dtype=torch.bfloat16)
    mlp = lambda: (dec.gate_up(x, wg, wu, h), dec.linear(h, wd, y))  # noqa: E731

    def mlp_ref():
        hr = F.gelu(x.double() @ wg.double().t(), approximate="tanh") * (x.double() @ wu.double().t())
        return hr @ wd.double().t()

    for how in ("eager", "graph"):
        if how == "eager":
            y.fill_(float("nan"))
            mlp()
        else:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                mlp()
            x.copy_(torch.randn_like(x))
            y.fill_(float("nan"))
            g.replay()
        torch.cuda.synchronize()
        n += 1
        e = rel_err(y, mlp_ref())
        if not e <= 1.2e-2:
            fails += 1
            log(f"  FAIL gate/up + linear ({how}): err={e:.3g}")
    # Refusals: M over the limit (8), K not a multiple of 8, a row stride that is not.
    x = torch.randn(9, 64, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    o = torch.empty(9, 64, device="cuda", dtype=torch.bfloat16)
    for what, rc in (("M=9", dec.gate_up(x, w, w, o)), ("K=60", dec.gate_up(x[:4, :60], w[:, :60], w[:, :60], o[:4])),
                     ("ldx=65", dec.gate_up(x.view(-1)[: 8 * 65].view(8, 65)[:, :64], w, w, o[:8]))):
        n += 1
        if rc == 0:
            fails += 1
            log(f"  FAIL: {what} was accepted")
    # Graph replay with new inputs.
    M, K, H = 8, 2048, 1024
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    wg, wu = (torch.randn(H, K, device="cuda").mul_(K ** -0.5).to(torch.bfloat16) for _ in range(2))
    h = torch.empty(M, H, device="cuda", dtype=torch.bfloat16)
    dec.gate_up(x, wg, wu, h, tanh=False)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        dec.gate_up(x, wg, wu, h, tanh=False)
    x.copy_(torch.randn_like(x))
    g.replay()
    torch.cuda.synchronize()
    ref = F.gelu(x.double() @ wg.double().t()) * (x.double() @ wu.double().t())
    n += 1
    e = rel_err(h, ref)
    if not e <= 1.2e-2:
        fails += 1
        log(f"  FAIL graph replay: err={e:.3g}")
    log(f"checks: {n - fails}/{n} passed")
    return fails


def bench(dec, gemm, dec_b=None):
    res = {}
    big = torch.empty(1 << 30, dtype=torch.uint8, device="cuda").random_()
    rd = graph_time(lambda: big.view(torch.int64).sum(), reps=5)
    bw_read = (1 << 30) / (statistics.median(rd() for _ in range(10)) * 1e-6)
    log(f"read bandwidth (int64 sum of 1 GiB): {bw_read / 1e12:.3f} TB/s")
    res["bw_read"] = bw_read
    del big
    bf = torch.bfloat16
    shapes = (("gemma2b", 2048, 16384), ("gemma2-2b", 2304, 9216), ("gemma7b", 3072, 24576),
              ("gemma2-9b", 3584, 14336), ("gemma2-27b", 4608, 36864))
    if os.environ.get("DECODE_SHAPES"):
        shapes = tuple(s for s in shapes if s[0] in os.environ["DECODE_SHAPES"].split(","))
    for name, d, H in shapes:
        wm = torch.randn(2 * H, d, device="cuda").mul_(d ** -0.5).to(bf)
        wg, wu = wm[:H], wm[H:]
        wd = torch.randn(d, H, device="cuda").mul_(H ** -0.5).to(bf)
        for M in tuple(int(m) for m in os.environ.get("DECODE_TOKENS", "1,2,4,8").split(",")):
            x = torch.randn(M, d, device="cuda").to(bf)
            r = torch.randn(M, d, device="cuda").to(bf)
            hh = torch.empty(M, H, device="cuda", dtype=bf)

            def cublas_geglu():
                gu = torch.mm(x, wm.t())
                return F.gelu(gu[:, :H], approximate="tanh") * gu[:, H:]

            yy = torch.empty(M, d, device="cuda", dtype=bf)

            def decode_rows(lib, tag=""):
                """The rows that run library `lib`'s kernels (the linear's up to 4 tokens)."""
                rows = {
                    "gate/up decode kernel": lambda: lib.gate_up(x, wg, wu, hh),
                    "MLP decode kernel + addmm": lambda: (lib.gate_up(x, wg, wu, hh), torch.addmm(r, hh, wd.t())),
                }
                if M <= 4:
                    rows["down decode linear"] = lambda: lib.linear(hh, wd, yy, residual=r)
                    rows["MLP decode kernel + decode linear"] = lambda: (
                        lib.gate_up(x, wg, wu, hh), lib.linear(hh, wd, yy, residual=r))
                return {k + tag: f for k, f in rows.items()}

            cands = {
                "gate/up cuBLAS merged mm": lambda: torch.mm(x, wm.t()),
                "gate/up cuBLAS mm + torch geglu": cublas_geglu,
                "MLP cuBLAS mm + torch geglu + addmm": lambda: torch.addmm(r, cublas_geglu(), wd.t()),
            }
            if gemm is not None:
                cands["gate/up engine"] = lambda: gemm(x, wg, wu, None, None, hh, True, 3)
                cands["MLP engine + addmm"] = lambda: (gemm(x, wg, wu, None, None, hh, True, 3),
                                                      torch.addmm(r, hh, wd.t()))
            if M <= 4:
                cands["down cuBLAS addmm"] = lambda: torch.addmm(r, hh, wd.t())
            cands.update(decode_rows(dec))
            if dec_b is not None:  # the same rows with the --lib-b build, interleaved with the first
                cands.update(decode_rows(dec_b, " [B]"))
            samples = graph_rounds(cands)
            wb = {"gate/up": 2 * d * H * 2, "MLP": 3 * d * H * 2, "down": d * H * 2}
            log(f"{name} M={M}: read-bandwidth floor: gate/up {wb['gate/up'] / bw_read * 1e6:.1f} us, "
                f"MLP {wb['MLP'] / bw_read * 1e6:.1f} us")
            for k, v in samples.items():
                med = statistics.median(v)
                b = wb[k.split(" ")[0]]
                log(f"  {k:42s} {med:8.1f} us ({min(v):.1f}-{max(v):.1f})  {b / (med * 1e-6) / bw_read:.0%} of read, "
                    f"{med / (b / bw_read * 1e6):.3f}x floor")
                res[f"{name} M={M} {k}"] = v
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--no-bench", action="store_true")
    ap.add_argument("--lib", default=os.path.join(ROOT, ".sm90dev", "libdecode_sm90.so"))
    ap.add_argument("--lib-b", help="a second build of the decode kernels, timed beside --lib")
    ap.add_argument("--gemm-lib", default=os.path.join(ROOT, ".sm90dev", "libgeglu_gemm_sm90.so"))
    a = ap.parse_args()
    dec = Decode(a.lib)
    log(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
        f"{datetime.date.today()}")
    fails = check(dec)
    gemm = None
    if os.path.exists(a.gemm_lib):
        from check_and_bench import Lib

        gemm = Lib(a.gemm_lib)
    res = {} if a.no_bench else bench(dec, gemm, Decode(a.lib_b) if a.lib_b else None)
    save_results(a.out, "check_decode", res)
    raise SystemExit(1 if fails else 0)


if __name__ == "__main__":
    main()
