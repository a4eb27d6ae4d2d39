"""Check and time the decode GEMMs (geglu_kernels/cuda/decode_sm90.cu, built as
.sm90dev/libdecode_sm90.so by `build_lib.sh geglu_kernels/cuda/decode_sm90.cu
libdecode_sm90`) against cuBLAS and the GeGLU engine at a GeGLU MLP's decode shapes.

Correctness: float64 reference on fresh random inputs, outputs poisoned with NaN,
M = 1..16 over odd (multiple-of-8) K and any row count, biases, residual, padded strides,
a merged weight read in place, every K split; CUDA-graph replay with new inputs.
Timing: each candidate captured 20 times in a CUDA graph and replayed, medians of 5
interleaved rounds, weights larger than L2 (every call reads them from HBM), against
the measured read and copy bandwidth.

    python tools/sm90_gemm/check_decode.py [--out DIR] [--no-bench] [--gemm-lib PATH]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics

import torch
import torch.nn.functional as F

from check_linear import graph_time
from harness import ROOT, log, save_log

DT = {torch.bfloat16: 0, torch.float16: 1}


class Decode:
    def __init__(self, path):
        L = self.L = ctypes.CDLL(path)
        i64, vp, ci = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int
        L.geglu_decode_sm90_gate_up.argtypes = [vp, i64, i64, i64, vp, vp, i64, vp, vp, vp, i64, i64, ci, ci, ci, vp]
        L.geglu_decode_sm90_linear.argtypes = [vp, i64, i64, i64, vp, i64, i64, vp, vp, i64, vp, i64, ci, ci, vp]

    @staticmethod
    def _p(t):
        return None if t is None else t.data_ptr()

    def gate_up(self, x, wg, wu, out, bg=None, bu=None, tanh=True, config=-1):
        s = torch.cuda.current_stream().cuda_stream
        return self.L.geglu_decode_sm90_gate_up(
            x.data_ptr(), x.shape[0], x.shape[1], x.stride(0), wg.data_ptr(), wu.data_ptr(), wg.stride(0),
            self._p(bg), self._p(bu), out.data_ptr(), wg.shape[0], out.stride(0), DT[x.dtype], int(tanh), config, s)

    def linear(self, x, w, out, bias=None, residual=None, config=-1):
        s = torch.cuda.current_stream().cuda_stream
        ldr = residual.stride(0) if residual is not None else 0
        return self.L.geglu_decode_sm90_linear(
            x.data_ptr(), x.shape[0], x.shape[1], x.stride(0), w.data_ptr(), w.shape[0], w.stride(0),
            self._p(bias), self._p(residual), ldr, out.data_ptr(), out.stride(0), DT[x.dtype], config, s)


def padded(rows, cols, pad, dtype, scale=1.0):
    base = torch.randn(rows, cols + pad, device="cuda", dtype=torch.float32).mul_(scale).to(dtype)
    return base[:, :cols]


def rel_err(y, ref):
    return ((y.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()


def check(dec):
    fails = n = 0
    tol = {torch.bfloat16: 1.2e-2, torch.float16: 2e-3}
    for dtype in (torch.bfloat16, torch.float16):
        for M in (1, 3, 8, 9, 15, 16):
            for K, rows in ((8, 8), (72, 24), (520, 40), (2056, 1000), (4104, 136)):
                for pad in (0, 8):
                    for config in (-1, 1, 3, 8):
                        x = padded(M, K, pad, dtype)
                        # gate/up: a merged weight, read in place (gate rows first)
                        w = padded(2 * rows, K, pad, dtype, K ** -0.5)
                        wg, wu = w[:rows], w[rows:]
                        bg = torch.randn(rows, device="cuda").to(dtype) if pad else None
                        bu = torch.randn(rows, device="cuda").to(dtype) if pad or M % 2 else None
                        for tanh in (True, False):
                            out = torch.full((M, rows + pad), float("nan"), device="cuda", dtype=dtype)[:, :rows]
                            rc = dec.gate_up(x, wg, wu, out, bg, bu, tanh, config)
                            g = x.double() @ wg.double().t() + (bg.double() if bg is not None else 0)
                            u = x.double() @ wu.double().t() + (bu.double() if bu is not None else 0)
                            ref = F.gelu(g, approximate="tanh" if tanh else "none") * u
                            n += 1
                            e = rel_err(out, ref) if rc == 0 else float("inf")
                            if not e <= tol[dtype]:
                                fails += 1
                                log(f"  FAIL gate/up {dtype} M={M} K={K} H={rows} pad={pad} cfg={config} "
                                    f"tanh={tanh}: rc={rc} err={e:.3g}")
                        # linear: W [N, K], bias, residual
                        N = rows + 3
                        wd = padded(N, K, pad, dtype, K ** -0.5)
                        b = torch.randn(N, device="cuda").to(dtype) if M % 2 else None
                        r = padded(M, N, 5 * pad, dtype) if M != 8 else None
                        out = torch.full((M, N + pad), float("nan"), device="cuda", dtype=dtype)[:, :N]
                        rc = dec.linear(x, wd, out, b, r, config)
                        ref = x.double() @ wd.double().t()
                        ref = ref + (b.double() if b is not None else 0) + (r.double() if r is not None else 0)
                        n += 1
                        e = rel_err(out, ref) if rc == 0 else float("inf")
                        if not e <= tol[dtype]:
                            fails += 1
                            log(f"  FAIL linear {dtype} M={M} K={K} N={N} pad={pad} cfg={config}: rc={rc} err={e:.3g}")
    # Refusals: M over the limit (16), K not a multiple of 8, misaligned x.
    x = torch.randn(65, 64, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    o = torch.empty(65, 64, device="cuda", dtype=torch.bfloat16)
    for what, rc in (("M=65", dec.gate_up(x, w, w, o)), ("K=60", dec.linear(x[:4, :60], w[:, :60], o[:4])),
                     ("x misaligned", dec.linear(x.view(-1)[1:65 * 8 + 1].view(8, 65)[:, :64], w, o[:8]))):
        n += 1
        if rc == 0:
            fails += 1
            log(f"  FAIL: {what} was accepted")
    # Graph replay with new inputs.
    M, K, H, N = 16, 2048, 1024, 512
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    wg, wu = (torch.randn(H, K, device="cuda").mul_(K ** -0.5).to(torch.bfloat16) for _ in range(2))
    wd = torch.randn(N, H, device="cuda").mul_(H ** -0.5).to(torch.bfloat16)
    r = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
    h = torch.empty(M, H, device="cuda", dtype=torch.bfloat16)
    y = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    step = lambda: (dec.gate_up(x, wg, wu, h, tanh=False), dec.linear(h, wd, y, None, r))  # noqa: E731
    step()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    x.copy_(torch.randn_like(x))
    r.copy_(torch.randn_like(r))
    g.replay()
    torch.cuda.synchronize()
    hr = F.gelu(x.double() @ wg.double().t()) * (x.double() @ wu.double().t())
    ref = hr.to(torch.bfloat16).double() @ wd.double().t() + r.double()
    n += 1
    e = rel_err(y, ref)
    if not e <= 1.2e-2:
        fails += 1
        log(f"  FAIL graph replay: err={e:.3g}")
    log(f"checks: {n - fails}/{n} passed")
    return fails


def bench(dec, gemm):
    res = {}
    big = torch.empty(1 << 30, dtype=torch.uint8, device="cuda").random_()
    rd = graph_time(lambda: big.view(torch.int64).sum(), reps=5)
    bw_read = (1 << 30) / (statistics.median(rd() for _ in range(10)) * 1e-6)
    cp_dst = torch.empty_like(big)
    cp = graph_time(lambda: cp_dst.copy_(big), reps=5)
    bw_copy = 2 * (1 << 30) / (statistics.median(cp() for _ in range(10)) * 1e-6)
    log(f"read bandwidth (int64 sum of 1 GiB): {bw_read / 1e12:.3f} TB/s; copy: {bw_copy / 1e12:.3f} TB/s")
    res["bw_read"], res["bw_copy"] = bw_read, bw_copy
    del big, cp_dst
    bf = torch.bfloat16
    for name, d, H in (("gemma2b", 2048, 16384), ("gemma7b", 3072, 24576)):
        wm = torch.randn(2 * H, d, device="cuda").mul_(d ** -0.5).to(bf)
        wg, wu = wm[:H], wm[H:]
        wd = torch.randn(d, H, device="cuda").mul_(H ** -0.5).to(bf)
        for M in (1, 8, 16):
            x = torch.randn(M, d, device="cuda").to(bf)
            h = torch.randn(M, H, device="cuda").to(bf)
            r = torch.randn(M, d, device="cuda").to(bf)
            y = torch.empty(M, d, device="cuda", dtype=bf)
            hh = torch.empty(M, H, device="cuda", dtype=bf)
            cands = {
                "down cuBLAS addmm +res": lambda: torch.addmm(r, h, wd.t(), out=y),
                "down ours +res": lambda: dec.linear(h, wd, y, None, r),
            }
            for s in (1, 2, 3, 4):
                cands[f"down ours split {s} +res"] = (lambda s=s: dec.linear(h, wd, y, None, r, s))
            cands["gate/up cuBLAS merged mm"] = lambda: torch.mm(x, wm.t())
            cands["gate/up ours geglu"] = lambda: dec.gate_up(x, wg, wu, hh, tanh=True)
            cands["gate/up ours geglu exact"] = lambda: dec.gate_up(x, wg, wu, hh, tanh=False)
            if gemm is not None:
                cands["gate/up engine geglu"] = lambda: gemm(x, wg, wu, None, None, hh, True, -1)

            def eager_mlp():
                gu = torch.mm(x, wm.t())
                a = F.gelu(gu[:, :H], approximate="tanh") * gu[:, H:]
                return torch.addmm(r, a, wd.t())

            cands["MLP cuBLAS mm + torch geglu + addmm"] = eager_mlp
            cands["MLP ours gate/up + ours down"] = lambda: (dec.gate_up(x, wg, wu, hh), dec.linear(hh, wd, y, None, r))
            timers = {}
            for k, f in cands.items():
                try:
                    timers[k] = graph_time(f)
                except Exception as e:  # noqa: BLE001
                    log(f"  {k}: failed {e}")
            samples = {k: [] for k in timers}
            for _ in range(5):
                for k, t in timers.items():
                    samples[k].append(t())
            wb = {"down": d * H * 2, "gate/up": 2 * d * H * 2, "MLP": 3 * d * H * 2}
            log(f"{name} M={M}: read-bandwidth floor: down {wb['down'] / bw_read * 1e6:.1f} us, gate/up "
                f"{wb['gate/up'] / bw_read * 1e6:.1f} us, MLP {wb['MLP'] / bw_read * 1e6:.1f} us")
            for k, v in samples.items():
                med = statistics.median(v)
                b = wb[k.split(" ")[0]]
                log(f"  {k:44s} {med:8.1f} us ({min(v):.1f}-{max(v):.1f})  {b / (med * 1e-6) / 1e12:.2f} TB/s = "
                    f"{b / (med * 1e-6) / bw_read:.0%} of read, {med / (b / bw_read * 1e6):.3f}x floor")
                res[f"{name} M={M} {k}"] = v
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--no-bench", action="store_true")
    ap.add_argument("--lib", default=os.path.join(ROOT, ".sm90dev", "libdecode_sm90.so"))
    ap.add_argument("--gemm-lib", default=os.path.join(ROOT, ".sm90dev", "libgeglu_gemm_sm90.so"))
    a = ap.parse_args()
    dec = Decode(a.lib)
    log(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    fails = check(dec)
    gemm = None
    if os.path.exists(a.gemm_lib):
        from check_and_bench import Lib

        gemm = Lib(a.gemm_lib)
    res = {} if a.no_bench else bench(dec, gemm)
    os.makedirs(a.out, exist_ok=True)
    save_log(os.path.join(a.out, "check_decode.log"))
    with open(os.path.join(a.out, "check_decode.json"), "w") as f:
        json.dump(res, f, indent=1)
    raise SystemExit(1 if fails else 0)


if __name__ == "__main__":
    main()
