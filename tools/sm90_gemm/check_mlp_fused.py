"""Check and time the one-kernel decode MLP (geglu_kernels/cuda/sm90/decode/mlp_fused_sm90.cu, built as
.sm90dev/libmlp_fused_sm90.so by `build_lib.sh geglu_kernels/cuda/sm90/decode/mlp_fused_sm90.cu
libmlp_fused_sm90`) against the two kernels it replaced: the swap-AB gate/up followed by
the split-K down projection (or, at 1-4 tokens, the decode linear), the libraries
check_linear_swapab.py uses.

Correctness: float64 reference (h rounded to the dtype, as the kernels store it) on fresh
random inputs, outputs poisoned with NaN; bf16 and fp16, tanh and exact GELU, biases on
both GEMMs, a residual, M = 1..64, odd widths; eight calls back to back with new x, eager
and replayed from a CUDA graph (check_linear_swapab.check_pairs: a down unit that read h
before its gate/up units stored it fails there); two streams at once.
Timing: CUDA graphs, medians of 5 interleaved rounds, weights larger than L2 (the rows:
the one kernel, and the swap-AB gate/up followed by the split-K kernel, by cuBLAS's addmm
or at 1-4 tokens by the decode linear); FUSED_SHAPES / FUSED_TOKENS (comma lists) narrow
the grid, and FUSED_SHAPES entries name=d:H add shapes (harness.decode_grid).

    python tools/sm90_gemm/check_mlp_fused.py [--out DIR] [--decode-lib .sm90dev/libdecode_sm90.so]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import time

import torch

from check_linear_swapab import SplitK, check_pairs, pair
from harness import (ROOT, decode_grid, graph_rounds, log, log_device, log_rows, mlp_weights, read_bandwidth,
                     rel_err, save_results, token_operands)

DT = {torch.bfloat16: 0, torch.float16: 1}


class Fused:
    def __init__(self, path):
        L = self.L = ctypes.CDLL(path)
        i64, vp, ci = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int
        L.geglu_mlp_fused_sm90_workspace_bytes.argtypes = [i64, i64, i64]
        L.geglu_mlp_fused_sm90_workspace_bytes.restype = i64
        L.geglu_mlp_fused_sm90.argtypes = [vp, i64, i64, i64, vp, vp, i64, vp, vp, vp, i64, vp, vp, i64, vp, i64, i64,
                                           vp, i64, vp, i64, ci, ci, vp]
        self.ws = {}

    def __call__(self, x, wg, wu, wd, h, y, r=None, bg=None, bu=None, bd=None, tanh=True, ws=None):
        M, D, H = x.shape[0], x.shape[1], wg.shape[0]
        if ws is None:
            key = (M, D, H, x.device)
            if key not in self.ws:
                n = max(self.L.geglu_mlp_fused_sm90_workspace_bytes(M, D, H), 16)
                self.ws[key] = torch.empty(n, dtype=torch.uint8, device=x.device)
            ws = self.ws[key]
        p = lambda t: None if t is None else t.data_ptr()  # noqa: E731
        return self.L.geglu_mlp_fused_sm90(
            x.data_ptr(), M, D, x.stride(0), wg.data_ptr(), wu.data_ptr(), wg.stride(0), p(bg), p(bu),
            wd.data_ptr(), wd.stride(0), p(bd), p(r), 0 if r is None else r.stride(0), h.data_ptr(), H,
            h.stride(0), y.data_ptr(), y.stride(0), ws.data_ptr(), ws.numel(), DT[x.dtype], int(tanh),
            torch.cuda.current_stream().cuda_stream)

    def mlp(self, x, wg, wu, wd, h, y, r):
        self(x, wg, wu, wd, h, y, r)


def sync_or_exit(what, seconds=20.0):
    """torch.cuda.synchronize(), but a kernel still running after `seconds` (a unit waiting
    for a count that never comes) ends the process with a message instead of hanging the
    device call until its time limit."""
    done = torch.cuda.Event()
    done.record()
    start = time.monotonic()
    while not done.query():
        if time.monotonic() - start > seconds:
            log(f"HANG: {what} still running after {seconds:.0f} s")
            os._exit(3)
        time.sleep(0.001)


def reference(x, wg, wu, wd, r, bg, bu, bd, tanh):
    g = x.double() @ wg.double().t() + (bg.double() if bg is not None else 0)
    u = x.double() @ wu.double().t() + (bu.double() if bu is not None else 0)
    gelu = torch.nn.functional.gelu(g, approximate="tanh" if tanh else "none")
    h = (gelu * u).to(x.dtype).double()
    y = h @ wd.double().t()
    return y + (bd.double() if bd is not None else 0) + (r.double() if r is not None else 0)


def check(fused):
    fails = n = 0
    tol = {torch.bfloat16: 1.5e-2, torch.float16: 3e-3}
    for dtype in (torch.bfloat16, torch.float16):
        for D, H in ((8, 8), (72, 24), (520, 1000), (2056, 1000), (1032, 9000), (2048, 16384)):
            wg = torch.randn(H, D, device="cuda").mul_(D ** -0.5).to(dtype)
            wu = torch.randn(H, D, device="cuda").mul_(D ** -0.5).to(dtype)
            wd = torch.randn(D, H, device="cuda").mul_(H ** -0.5).to(dtype)
            for M in (1, 2, 5, 16, 17, 33, 64):
                x = torch.randn(M, D, device="cuda").to(dtype)
                with_bias = (M + D) % 2 == 1
                bg = torch.randn(H, device="cuda").to(dtype) if with_bias else None
                bu = torch.randn(H, device="cuda").to(dtype) if with_bias else None
                bd = torch.randn(D, device="cuda").to(dtype) if M % 2 else None
                r = torch.randn(M, D, device="cuda").to(dtype) if M % 3 else None
                for tanh in (True, False):
                    h = torch.full((M, H), float("nan"), device="cuda", dtype=dtype)
                    y = torch.full((M, D), float("nan"), device="cuda", dtype=dtype)
                    rc = fused(x, wg, wu, wd, h, y, r, bg, bu, bd, tanh)
                    sync_or_exit(f"{dtype} M={M} D={D} H={H}")
                    n += 1
                    e = rel_err(y, reference(x, wg, wu, wd, r, bg, bu, bd, tanh)) if rc == 0 else float("inf")
                    if not e <= tol[dtype]:
                        fails += 1
                        log(f"  FAIL {dtype} M={M} D={D} H={H} tanh={tanh}: rc={rc} err={e:.3g}")
    # Two streams at once (each stream has its own counts), each call checked after all ran.
    M, D, H = 16, 2048, 16384
    bf = torch.bfloat16
    wg, wu = (torch.randn(H, D, device="cuda").mul_(D ** -0.5).to(bf) for _ in range(2))
    wd = torch.randn(D, H, device="cuda").mul_(H ** -0.5).to(bf)
    streams = [torch.cuda.Stream() for _ in range(2)]
    xs = [torch.randn(M, D, device="cuda").to(bf) for _ in range(8)]
    hs = [torch.empty(M, H, device="cuda", dtype=bf) for _ in range(8)]
    ys = [torch.full((M, D), float("nan"), device="cuda", dtype=bf) for _ in range(8)]
    wss = [torch.empty(fused.L.geglu_mlp_fused_sm90_workspace_bytes(M, D, H), dtype=torch.uint8, device="cuda")
           for _ in range(8)]
    torch.cuda.synchronize()
    for i in range(8):
        with torch.cuda.stream(streams[i % 2]):
            fused(xs[i], wg, wu, wd, hs[i], ys[i], ws=wss[i])
    for st in streams:
        with torch.cuda.stream(st):
            sync_or_exit("two streams")
    torch.cuda.synchronize()
    for i in range(8):
        n += 1
        e = rel_err(ys[i], reference(xs[i], wg, wu, wd, None, None, None, None, True))
        if not e <= 1.5e-2:
            fails += 1
            log(f"  FAIL two streams, call {i}: err={e:.3g}")
    log(f"checks: {n - fails}/{n} passed")
    return fails + check_pairs([("fused", fused.mlp)])


def bench(fused, lin, swap, dec=None):
    res = {}
    bw_read = read_bandwidth()
    res["bw_read"] = bw_read
    shapes, token_counts = decode_grid("FUSED", "1,4,8,16,32")
    for name, d, H in shapes:
        wg, wu, wd = mlp_weights(d, H)
        for M in token_counts:
            x, hh, r, yy = token_operands(M, d, H)
            cands = {
                "MLP swap-AB + split-K": lambda: pair(swap, lin)(x, wg, wu, wd, hh, yy, r),
                "MLP swap-AB + addmm": lambda: (swap(x, wg, wu, hh), torch.addmm(r, hh, wd.t())),
                "MLP fused": lambda: fused(x, wg, wu, wd, hh, yy, r),
            }
            if dec is not None and M <= 4:
                cands["MLP swap-AB + decode linear"] = lambda: pair(swap, dec.linear)(x, wg, wu, wd, hh, yy, r)
            samples = graph_rounds(cands)
            floor = 3 * d * H * 2 / bw_read * 1e6
            log(f"{name} M={M}: read-bandwidth floor: MLP {floor:.1f} us")
            log_rows(f"{name} M={M}", samples, lambda k: floor, res)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--no-bench", action="store_true")
    ap.add_argument("--lib", default=os.path.join(ROOT, ".sm90dev", "libmlp_fused_sm90.so"))
    ap.add_argument("--linear-lib", default=os.path.join(ROOT, ".sm90dev", "liblinear_swapab_sm90.so"))
    ap.add_argument("--swap-lib", default=os.path.join(ROOT, ".sm90dev", "libgeglu_swapab_sm90.so"))
    ap.add_argument("--decode-lib", help="the decode linear (check_decode.py's library)")
    a = ap.parse_args()
    from check_swap import Swap

    fused = Fused(a.lib)
    log_device()
    fails = check(fused)
    dec = None
    if a.decode_lib:
        from check_decode import Decode

        dec = Decode(a.decode_lib)
    res = {} if a.no_bench else bench(fused, SplitK(a.linear_lib), Swap(a.swap_lib), dec)
    save_results(a.out, "check_mlp_fused", res)
    raise SystemExit(1 if fails else 0)


if __name__ == "__main__":
    main()
