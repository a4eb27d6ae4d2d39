"""Check and time the swap-AB gate/up (geglu_kernels/cuda/sm90/bf16/geglu_swapab_sm90.cu, built as
.sm90dev/libgeglu_swapab_sm90.so by `build_lib.sh geglu_kernels/cuda/sm90/bf16/geglu_swapab_sm90.cu
libgeglu_swapab_sm90`) against the engine's small-M tile (the op's route above 32 tokens),
cuBLAS's merged GEMM (with and without torch's GeGLU after it). The MLP rows pair each
gate/up with the down projection the op runs after it (with --decode-lib, the decode
linear at 1-4 tokens; cuBLAS's addmm above), beside eager's kernels (cuBLAS's merged
GEMM, torch's GeGLU, addmm). (The same-run comparison with the decode
gate/up kernel this one replaced at 1-4 tokens: commit e20bd53's version of this script,
--decode-lib a build of that commit's decode_sm90.cu; H200, 2026-11-26:
benchmarks/results/h200_2026-11-26/excerpts.log [check_swap_vs_decode_h200].)

Correctness: float64 reference on fresh random inputs, outputs poisoned with NaN, M = 1..64
over odd (multiple-of-8) K and any H, biases, padded strides, a merged weight read in
place with the up rows first, tanh and exact GELU, bf16 and fp16.
Timing: CUDA graphs, medians of 5 interleaved rounds, weights larger than L2.

    python tools/sm90_gemm/check_swap.py [--out DIR] [--lib PATH] [--lib-b PATH] [--decode-lib PATH]
"""

from __future__ import annotations

import argparse
import ctypes
import os

import torch
import torch.nn.functional as F

from harness import (ROOT, decode_grid, graph_rounds, log, log_device, log_rows, padded, read_bandwidth,
                     rel_err, save_results)

DT = {torch.bfloat16: 0, torch.float16: 1}


class Swap:
    def __init__(self, path):
        L = self.L = ctypes.CDLL(path)
        i64, vp, ci = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int
        L.geglu_swapab_sm90.argtypes = [vp, i64, i64, i64, vp, vp, i64, vp, vp, vp, i64, i64, ci, ci, vp]

    def __call__(self, x, wg, wu, out, bg=None, bu=None, tanh=True):
        s = torch.cuda.current_stream().cuda_stream
        p = lambda t: None if t is None else t.data_ptr()  # noqa: E731
        return self.L.geglu_swapab_sm90(
            x.data_ptr(), x.shape[0], x.shape[1], x.stride(0), wg.data_ptr(), wu.data_ptr(), wg.stride(0),
            p(bg), p(bu), out.data_ptr(), wg.shape[0], out.stride(0), DT[x.dtype], int(tanh), s)


def check(swap):
    fails = n = 0
    tol = {torch.bfloat16: 1.2e-2, torch.float16: 2e-3}
    for dtype in (torch.bfloat16, torch.float16):
        for M in (1, 2, 5, 8, 13, 16, 17, 33, 64):
            for K, H in ((8, 8), (72, 24), (520, 41), (2056, 1000), (4104, 136), (1032, 9000), (2048, 128)):
                for pad in (0, 8):
                    x = padded(M, K, pad, dtype)
                    w = padded(2 * H, K, pad, dtype, K ** -0.5)
                    up_first = (M + K) % 2 == 1
                    wg, wu = (w[H:], w[:H]) if up_first else (w[:H], w[H:])
                    bg = torch.randn(H, device="cuda").to(dtype) if pad else None
                    bu = torch.randn(H, device="cuda").to(dtype) if pad or M % 2 else None
                    for tanh in (True, False):
                        out = torch.full((M, H + pad), float("nan"), device="cuda", dtype=dtype)[:, :H]
                        rc = swap(x, wg, wu, out, bg, bu, tanh)
                        torch.cuda.synchronize()
                        g = x.double() @ wg.double().t() + (bg.double() if bg is not None else 0)
                        u = x.double() @ wu.double().t() + (bu.double() if bu is not None else 0)
                        ref = F.gelu(g, approximate="tanh" if tanh else "none") * u
                        n += 1
                        e = rel_err(out, ref) if rc == 0 else float("inf")
                        if not e <= tol[dtype]:
                            fails += 1
                            log(f"  FAIL {dtype} M={M} K={K} H={H} pad={pad} tanh={tanh}: rc={rc} err={e:.3g}")
    # Graph replay with new inputs.
    M, K, H = 16, 2048, 1024
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    wg, wu = (torch.randn(H, K, device="cuda").mul_(K ** -0.5).to(torch.bfloat16) for _ in range(2))
    h = torch.empty(M, H, device="cuda", dtype=torch.bfloat16)
    swap(x, wg, wu, h, tanh=False)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        swap(x, wg, wu, h, tanh=False)
    x.copy_(torch.randn_like(x))
    h.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    ref = F.gelu(x.double() @ wg.double().t()) * (x.double() @ wu.double().t())
    n += 1
    if not rel_err(h, ref) <= 1.2e-2:
        fails += 1
        log("  FAIL graph replay")
    log(f"checks: {n - fails}/{n} passed")
    return fails


def bench(swap, gemm, swap_b=None, dec=None):
    res = {}
    bw_read = read_bandwidth()
    bf = torch.bfloat16
    shapes, token_counts = decode_grid("SWAP", "1,4,8,16,32,64")
    for name, d, H in shapes:
        wm = torch.randn(2 * H, d, device="cuda").mul_(d ** -0.5).to(bf)
        wg, wu = wm[:H], wm[H:]
        wd = torch.randn(d, H, device="cuda").mul_(H ** -0.5).to(bf)
        for M in token_counts:
            x = torch.randn(M, d, device="cuda").to(bf)
            r = torch.randn(M, d, device="cuda").to(bf)
            hh = torch.empty(M, H, device="cuda", dtype=bf)
            yy = torch.empty(M, d, device="cuda", dtype=bf)
            small = dec is not None and M <= 4
            down = (lambda: dec.linear(hh, wd, yy, residual=r)) if small else (lambda: torch.addmm(r, hh, wd.t()))

            def cublas_geglu():
                gu = torch.mm(x, wm.t())
                return F.gelu(gu[:, :H], approximate="tanh") * gu[:, H:]

            cands = {
                "cuBLAS merged mm": lambda: torch.mm(x, wm.t()),
                "cuBLAS mm + torch geglu": cublas_geglu,
                "swap-AB fused": lambda: swap(x, wg, wu, hh),
                "MLP eager's kernels (cuBLAS mm + torch geglu + addmm)": lambda: torch.addmm(r, cublas_geglu(), wd.t()),
            }
            if swap_b is not None:
                cands["swap-AB fused [B]"] = lambda: swap_b(x, wg, wu, hh)
            if gemm is not None:
                cands["engine (op's pick)"] = lambda: gemm(x, wg, wu, None, None, hh, True, -1)
            if gemm is not None:
                cands["MLP engine + addmm"] = lambda: (gemm(x, wg, wu, None, None, hh, True, -1), down())
            cands["MLP swap-AB + " + ("decode linear" if small else "addmm")] = lambda: (swap(x, wg, wu, hh), down())
            samples = graph_rounds(cands)
            floor = 2 * d * H * 2 / bw_read * 1e6
            log(f"{name} M={M}: read-bandwidth floor: gate/up {floor:.1f} us, MLP {1.5 * floor:.1f} us")
            log_rows(f"{name} M={M}", samples, lambda k: 1.5 * floor if k.startswith("MLP") else floor, res,
                     width=54)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--no-bench", action="store_true")
    ap.add_argument("--lib", default=os.path.join(ROOT, ".sm90dev", "libgeglu_swapab_sm90.so"))
    ap.add_argument("--lib-b", help="a second build, timed beside --lib")
    ap.add_argument("--gemm-lib", default=os.path.join(ROOT, ".sm90dev", "libgeglu_gemm_sm90.so"))
    ap.add_argument("--decode-lib", help="the decode kernels (check_decode.py's library)")
    a = ap.parse_args()
    swap = Swap(a.lib)
    log_device()
    fails = check(swap)
    gemm = None
    if os.path.exists(a.gemm_lib):
        from check_and_bench import Lib

        gemm = Lib(a.gemm_lib)
    dec = None
    if a.decode_lib:
        from check_decode import Decode

        dec = Decode(a.decode_lib)
    res = {} if a.no_bench else bench(swap, gemm, Swap(a.lib_b) if a.lib_b else None, dec)
    save_results(a.out, "check_swap", res)
    raise SystemExit(1 if fails else 0)


if __name__ == "__main__":
    main()
