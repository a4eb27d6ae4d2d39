"""Check and time the split-K swap-AB down projection (geglu_kernels/cuda/sm90/bf16/linear_swapab_sm90.cu,
built as .sm90dev/liblinear_swapab_sm90.so by `build_lib.sh
geglu_kernels/cuda/sm90/bf16/linear_swapab_sm90.cu liblinear_swapab_sm90`) against cuBLAS's addmm and
the decode linear (decode_sm90.cu, 1-4 tokens), alone and in the MLP after the swap-AB
gate/up, at a GeGLU MLP's decode shapes.

Correctness: float64 reference on fresh random inputs, outputs poisoned with NaN, M = 1..64
over odd (multiple-of-8) K and any output width, a bias, a residual, padded strides; the
refusals (a workspace too small, K not a multiple of 8); CUDA-graph replay with new inputs;
with the gate/up library, the MLP pairs (gate/up writing h, the down projection reading it)
eight calls back to back, eager and from a graph.
Timing: CUDA graphs, medians of 5 interleaved rounds, weights larger than L2. `--lib-b`
adds the rows of a second build, interleaved with the first (with --swap-lib-b too, rows
of both B builds together: a change that spans the two kernels). LINEAR_SHAPES and
LINEAR_TOKENS (comma lists) narrow the grid.

    python tools/sm90_gemm/check_linear_swapab.py [--out DIR] [--lib-b PATH] [--decode-lib PATH]
"""

from __future__ import annotations

import argparse
import ctypes
import os

import torch

from harness import (ROOT, check_linear_case, decode_grid, graph_rounds, log, log_device, log_rows,
                     mlp_weights, read_bandwidth, rel_err, save_results, token_operands)

DT = {torch.bfloat16: 0, torch.float16: 1}


class SplitK:
    def __init__(self, path):
        L = self.L = ctypes.CDLL(path)
        i64, vp, ci = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int
        L.geglu_linear_swapab_sm90_workspace_bytes.argtypes = [i64, i64, i64]
        L.geglu_linear_swapab_sm90_workspace_bytes.restype = i64
        L.geglu_linear_swapab_sm90.argtypes = [vp, i64, i64, i64, vp, i64, vp, vp, i64, vp, i64, i64, vp, i64, ci, vp]
        self.ws = {}

    def workspace(self, M, K, N):
        return self.L.geglu_linear_swapab_sm90_workspace_bytes(M, K, N)

    def __call__(self, x, w, out, bias=None, residual=None, ws=None):
        M, K, N = x.shape[0], x.shape[1], w.shape[0]
        if ws is None:
            key = (M, K, N, x.device)
            if key not in self.ws:
                self.ws[key] = torch.empty(max(self.workspace(M, K, N), 16), dtype=torch.uint8, device=x.device)
            ws = self.ws[key]
        s = torch.cuda.current_stream().cuda_stream
        p = lambda t: None if t is None else t.data_ptr()  # noqa: E731
        return self.L.geglu_linear_swapab_sm90(
            x.data_ptr(), M, K, x.stride(0), w.data_ptr(), w.stride(0), p(bias), p(residual),
            0 if residual is None else residual.stride(0), out.data_ptr(), N, out.stride(0), ws.data_ptr(),
            ws.numel(), DT[x.dtype], s)


def check(lin):
    fails = n = 0
    tol = {torch.bfloat16: 1.2e-2, torch.float16: 2e-3}
    for dtype in (torch.bfloat16, torch.float16):
        for M in (1, 2, 4, 5, 8, 13, 16, 17, 32, 33, 64):
            for K, N in ((8, 8), (24, 9), (72, 24), (520, 41), (2056, 1000), (4104, 136), (16392, 300),
                         (24576, 3072)):
                for pad in (0, 8):
                    rc, e = check_linear_case(lin, M, K, N, pad, dtype)
                    n += 1
                    if not e <= tol[dtype]:
                        fails += 1
                        log(f"  FAIL {dtype} M={M} K={K} N={N} pad={pad}: rc={rc} err={e:.3g}")
    # Refusals: a workspace one float short, K not a multiple of 8.
    x = torch.randn(16, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(1024, 4096, device="cuda", dtype=torch.bfloat16)
    o = torch.empty(16, 1024, device="cuda", dtype=torch.bfloat16)
    need = lin.workspace(16, 4096, 1024)
    short = torch.empty(need, dtype=torch.uint8, device="cuda")[: need - 4]
    for what, rc in (("workspace short by 4 bytes", lin(x, w, o, ws=short)),
                     ("K=60", lin(x[:, :60], w[:, :60], o))):
        n += 1
        if rc == 0:
            fails += 1
            log(f"  FAIL: {what} was accepted")
    # Graph replay with new inputs.
    M, K, N = 16, 8192, 2048
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, K, device="cuda").mul_(K ** -0.5).to(torch.bfloat16)
    r = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
    y = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    lin(x, w, y, residual=r)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        lin(x, w, y, residual=r)
    x.copy_(torch.randn_like(x))
    y.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    n += 1
    e = rel_err(y, x.double() @ w.double().t() + r.double())
    if not e <= 1.2e-2:
        fails += 1
        log(f"  FAIL graph replay: err={e:.3g}")
    # Two streams at once (each stream has its own arrival counters), each call's result
    # checked after the rest have run.
    streams = [torch.cuda.Stream() for _ in range(2)]
    xs = [torch.randn(M, K, device="cuda", dtype=torch.bfloat16) for _ in range(8)]
    ys = [torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16) for _ in range(8)]
    ws = [torch.empty(lin.workspace(M, K, N), dtype=torch.uint8, device="cuda") for _ in range(8)]
    torch.cuda.synchronize()
    for i in range(8):
        with torch.cuda.stream(streams[i % 2]):
            lin(xs[i], w, ys[i], residual=r, ws=ws[i])
    torch.cuda.synchronize()
    for i in range(8):
        n += 1
        e = rel_err(ys[i], xs[i].double() @ w.double().t() + r.double())
        if not e <= 1.2e-2:
            fails += 1
            log(f"  FAIL two streams, call {i}: err={e:.3g}")
    log(f"checks: {n - fails}/{n} passed")
    return fails


def pair(gate_up, down):
    """The MLP as the op runs it from a gate/up, gate_up(x, wg, wu, h), and a down
    projection, down(h, w, y, residual): mlp(x, wg, wu, wd, h, y, r) for check_pairs."""
    def mlp(x, wg, wu, wd, h, y, r):
        gate_up(x, wg, wu, h)
        down(h, wd, y, residual=r)

    return mlp


def check_pairs(mlps, max_tokens=None):
    """The MLP's down projection reading the h its gate/up wrote the moment before: mlps is
    [(label, mlp)], mlp(x, wg, wu, wd, h, y, r) (pair() above, or one fused kernel).
    Eight calls back to back with new x each (h reused, so a down projection that read h
    before its gate/up finished would read the last call's), eager and replayed from a
    CUDA graph, each y against a float64 reference. max_tokens: {label: M} limits."""
    fails = n = 0
    bf = torch.bfloat16
    for d, H, tokens in ((3072, 24576, (1, 4, 16, 32)), (520, 1000, (3, 17))):
        wg = torch.randn(H, d, device="cuda").mul_(d ** -0.5).to(bf)
        wu = torch.randn(H, d, device="cuda").mul_(d ** -0.5).to(bf)
        wd = torch.randn(d, H, device="cuda").mul_(H ** -0.5).to(bf)
        for M in tokens:
            xs = [torch.randn(M, d, device="cuda").to(bf) for _ in range(8)]
            r = torch.randn(M, d, device="cuda").to(bf)
            refs = []
            for xi in xs:
                gate, up = xi.double() @ wg.double().t(), xi.double() @ wu.double().t()
                tanh = torch.tanh((2 / torch.pi) ** 0.5 * (gate + 0.044715 * gate**3))
                h = (0.5 * gate * (1 + tanh) * up).to(bf)
                refs.append(h.double() @ wd.double().t() + r.double())
            for label, mlp in mlps:
                if M > (max_tokens or {}).get(label, M):
                    continue
                x = torch.empty(M, d, device="cuda", dtype=bf)
                hh = torch.empty(M, H, device="cuda", dtype=bf)
                y = torch.empty(M, d, device="cuda", dtype=bf)

                def call(x=x, hh=hh, y=y, mlp=mlp):
                    mlp(x, wg, wu, wd, hh, y, r)

                graph = torch.cuda.CUDAGraph()
                x.copy_(xs[0])
                call()
                torch.cuda.synchronize()
                with torch.cuda.graph(graph):
                    call()
                for mode, run in (("eager", call), ("graph", graph.replay)):
                    ys = [torch.full((M, d), float("nan"), device="cuda", dtype=bf) for _ in xs]
                    hh.fill_(float("nan"))
                    for xi, yi in zip(xs, ys):
                        x.copy_(xi)
                        run()
                        yi.copy_(y)
                    torch.cuda.synchronize()
                    for i, (yi, ref) in enumerate(zip(ys, refs)):
                        n += 1
                        e = rel_err(yi, ref)
                        if not e <= 1.5e-2:
                            fails += 1
                            log(f"  FAIL MLP {label} d={d} H={H} M={M} {mode} call {i}: err={e:.3g}")
    log(f"MLP pair checks: {n - fails}/{n} passed")
    return fails


def bench(lin, lin_b=(), dec=None, swap=None, swap_b=None, dec_b=None):
    res = {}
    bw_read = read_bandwidth()
    res["bw_read"] = bw_read
    shapes, token_counts = decode_grid("LINEAR", "1,4,8,16,32")
    for name, d, H in shapes:
        wg, wu, wd = mlp_weights(d, H)
        for M in token_counts:
            x, hh, r, yy = token_operands(M, d, H)
            cands = {
                "down cuBLAS addmm": lambda: torch.addmm(r, hh, wd.t()),
                "down split-K swap-AB": lambda: lin(hh, wd, yy, residual=r),
            }
            for i, lb in enumerate(lin_b):
                cands[f"down split-K swap-AB [B{i + 1}]"] = lambda lb=lb: lb(hh, wd, yy, residual=r)
            if dec is not None and M <= 4:
                cands["down decode linear"] = lambda: dec.linear(hh, wd, yy, residual=r)
            if dec_b is not None and M <= 4:
                cands["down decode linear [B]"] = lambda: dec_b.linear(hh, wd, yy, residual=r)
            if swap is not None:
                gu = lambda: swap(x, wg, wu, hh)  # noqa: E731
                cands["MLP swap-AB + addmm"] = lambda: (gu(), torch.addmm(r, hh, wd.t()))
                cands["MLP swap-AB + split-K"] = lambda: (gu(), lin(hh, wd, yy, residual=r))
                for i, lb in enumerate(lin_b):
                    cands[f"MLP swap-AB + split-K [B{i + 1}]"] = lambda lb=lb: (gu(), lb(hh, wd, yy, residual=r))
                if dec is not None and M <= 4:
                    cands["MLP swap-AB + decode linear"] = lambda: (gu(), dec.linear(hh, wd, yy, residual=r))
                if dec_b is not None and M <= 4:
                    cands["MLP swap-AB + decode linear [B]"] = lambda: (gu(), dec_b.linear(hh, wd, yy, residual=r))
            if swap_b is not None:  # a second gate/up build before each down projection
                gb = lambda: swap_b(x, wg, wu, hh)  # noqa: E731
                cands["MLP swap-AB [B] + addmm"] = lambda: (gb(), torch.addmm(r, hh, wd.t()))
                cands["MLP swap-AB [B] + split-K"] = lambda: (gb(), lin(hh, wd, yy, residual=r))
                if dec is not None and M <= 4:
                    cands["MLP swap-AB [B] + decode linear"] = lambda: (gb(), dec.linear(hh, wd, yy, residual=r))
                # Both halves from the B builds (a change that spans the two kernels).
                for i, lb in enumerate(lin_b):
                    cands[f"MLP swap-AB [B] + split-K [B{i + 1}]"] = lambda lb=lb: (gb(), lb(hh, wd, yy, residual=r))
                if dec_b is not None and M <= 4:
                    cands["MLP swap-AB [B] + decode linear [B]"] = lambda: (gb(), dec_b.linear(hh, wd, yy, residual=r))
            samples = graph_rounds(cands)
            floor = d * H * 2 / bw_read * 1e6
            log(f"{name} M={M}: read-bandwidth floor: down {floor:.1f} us, MLP {3 * floor:.1f} us")
            log_rows(f"{name} M={M}", samples, lambda k: 3 * floor if k.startswith("MLP") else floor, res)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--no-bench", action="store_true")
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--lib", default=os.path.join(ROOT, ".sm90dev", "liblinear_swapab_sm90.so"))
    ap.add_argument("--lib-b", action="append", default=[],
                    help="another build, timed beside --lib as [B1], [B2], ... (repeatable)")
    ap.add_argument("--decode-lib", help="the decode linear (check_decode.py's library)")
    ap.add_argument("--decode-lib-b", help="a second decode linear build, rows [B]")
    ap.add_argument("--swap-lib", default=os.path.join(ROOT, ".sm90dev", "libgeglu_swapab_sm90.so"),
                    help="the swap-AB gate/up, for the MLP rows")
    ap.add_argument("--swap-lib-b", help="a second gate/up build, for MLP rows [B]")
    a = ap.parse_args()
    lin = SplitK(a.lib)
    log_device()
    fails = 0 if a.no_check else check(lin)
    dec = swap = dec_b = None
    if a.decode_lib:
        from check_decode import Decode

        dec = Decode(a.decode_lib)
        dec_b = Decode(a.decode_lib_b) if a.decode_lib_b else None
    if os.path.exists(a.swap_lib):
        from check_swap import Swap

        swap = Swap(a.swap_lib)
    swap_b = None
    if a.swap_lib_b:
        from check_swap import Swap

        swap_b = Swap(a.swap_lib_b)
    lin_b = [SplitK(p) for p in a.lib_b]
    if swap is not None and not a.no_check:
        pairs = [("swap-AB + split-K", swap, lin)]
        pairs += [(f"swap-AB + decode linear{t}", swap, d.linear) for t, d in (("", dec), (" [B]", dec_b)) if d]
        if swap_b is not None:
            pairs += [(f"swap-AB [B] + split-K [B{i + 1}]", swap_b, lb) for i, lb in enumerate(lin_b)]
            pairs += [("swap-AB [B] + decode linear [B]", swap_b, dec_b.linear)] if dec_b else []
        decode_only = {label: 4 for label, _, _ in pairs if "decode" in label}
        fails += check_pairs([(label, pair(g, dn)) for label, g, dn in pairs], decode_only)
    res = {} if a.no_bench else bench(lin, lin_b, dec, swap, swap_b, dec_b)
    save_results(a.out, "check_linear_swapab", res)
    raise SystemExit(1 if fails else 0)


if __name__ == "__main__":
    main()
