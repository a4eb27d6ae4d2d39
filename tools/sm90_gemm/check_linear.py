"""Check and time the small-M Hopper linear (.sm90dev/liblinear_sm90.so: build_lib.sh, see its header)
against cuBLAS at the decode shapes of a GeGLU MLP, and the fused gate/up engine's
small-M variants (.sm90dev/libgeglu_gemm_sm90.so, build.sh: variants 0-3 are the
product's in either build) beside them.

Correctness: float64 reference on fresh random inputs, outputs poisoned with NaN,
M = 1..64 over odd (multiple-of-8) N and K, bias / residual / batch (gate and up in one
launch), padded strides, CUDA-graph replay. Timing: each candidate captured 20 times in a
CUDA graph, replayed, median of interleaved rounds, weights larger than L2 (so every
call reads them from HBM), against the measured read bandwidth (torch.sum over 1 GiB).

    python tools/sm90_gemm/check_linear.py [--out DIR] [--no-bench] [--gemm-lib PATH]
    ncu ... --profile-from-start off python tools/sm90_gemm/check_linear.py --probe
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import os
import statistics

import torch

from harness import ROOT, log, save_results

DT = {torch.bfloat16: 0, torch.float16: 1}


class Linear:
    def __init__(self, path):
        L = self.L = ctypes.CDLL(path)
        i64, vp, ci, sz = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
        L.linear_sm90.argtypes = [vp, i64, i64, i64, vp, i64, i64, i64, ci, vp, vp, i64, vp, i64, i64, ci, ci, vp, sz, vp]
        L.linear_sm90.restype = ci
        L.linear_sm90_workspace_size.argtypes = [i64, i64, i64, ci, ci, ci, ctypes.POINTER(sz)]
        L.linear_sm90_workspace_size.restype = ci
        L.linear_sm90_status_string.argtypes = [ci]
        L.linear_sm90_status_string.restype = ctypes.c_char_p
        L.linear_sm90_config_name.argtypes = [ci]
        L.linear_sm90_config_name.restype = ctypes.c_char_p
        self.n = L.linear_sm90_num_configs()
        self.names = [L.linear_sm90_config_name(i).decode() for i in range(self.n)]
        self.ws = {}

    def workspace(self, M, N, K, batch, dtype, config):
        n = ctypes.c_size_t(0)
        rc = self.L.linear_sm90_workspace_size(M, N, K, batch, DT[dtype], config, ctypes.byref(n))
        assert rc == 0, self.L.linear_sm90_status_string(rc)
        key = (M, N, K, batch, dtype, config)
        if key not in self.ws:
            self.ws[key] = torch.empty(max(n.value, 16), dtype=torch.uint8, device="cuda")
        return self.ws[key]

    def __call__(self, x, w, out, bias=None, residual=None, config=-1, batch=1, w_bs=0, out_bs=0):
        M, K = x.shape
        N = out.shape[-1]
        ws = self.workspace(M, N, K, batch, x.dtype, config)
        p = lambda t: t.data_ptr() if t is not None else None
        return self.L.linear_sm90(p(x), M, K, x.stride(0), p(w), N, w.stride(0), w_bs, batch, p(bias), p(residual),
                                  residual.stride(0) if residual is not None else 0, p(out), out.stride(-2), out_bs,
                                  DT[x.dtype], config, p(ws), ws.numel(), torch.cuda.current_stream().cuda_stream)

    def status(self, rc):
        return self.L.linear_sm90_status_string(rc).decode()


def check(lin):
    fails = 0
    n = 0
    g = torch.Generator(device="cuda").manual_seed(0)
    cases = []
    for M in (1, 2, 7, 16, 17, 33, 64):
        for (N, K) in ((136, 264), (1000, 3000), (2048, 16384), (24, 8)):
            for dtype in (torch.bfloat16, torch.float16):
                cases.append((M, N, K, dtype))
    for i, (M, N, K, dtype) in enumerate(cases):
        bias_on, res_on, pad = i % 2 == 0, i % 3 != 0, 8 * (i % 2)
        for cfg in [-1] + list(range(lin.n)) if (i % 9 == 0) else [-1]:
            x = (torch.randn(M, K + pad, device="cuda", generator=g) * 0.5).to(dtype)[:, :K]
            w = (torch.randn(N, K, device="cuda", generator=g) / K ** 0.5).to(dtype)
            b = (torch.randn(N, device="cuda", generator=g) * 0.5).to(dtype) if bias_on else None
            r = torch.randn(M, N + pad, device="cuda", generator=g).to(dtype)[:, :N] if res_on else None
            out_full = torch.full((M, N + pad), float("nan"), device="cuda", dtype=dtype)
            out = out_full[:, :N]
            rc = lin(x, w, out, b, r, cfg)
            torch.cuda.synchronize()
            ref = x.double() @ w.double().t()
            if b is not None:
                ref += b.double()
            if r is not None:
                ref += r.double()
            ok = rc == 0
            rel = float("nan")
            if ok:
                rel = float((out.double() - ref).norm() / ref.norm())
                ok = rel < (8e-3 if dtype == torch.bfloat16 else 2e-3) and (pad == 0 or bool(out_full[:, N:].isnan().all()))
            n += 1
            fails += not ok
            if not ok or cfg != -1 or M in (1, 64):
                log(f"  check M={M} N={N} K={K} {str(dtype)[6:]} bias={bias_on} res={res_on} pad={pad} cfg={cfg}: "
                    f"{'ok' if ok else 'FAIL'} rc={rc} rel={rel:.2e}")
    # batch 2: gate and up weights as two allocations in one launch
    for M in (1, 16, 64):
        for sep in (True, False):
            K, H, dtype = 392, 328, torch.bfloat16
            x = (torch.randn(M, K, device="cuda", generator=g) * 0.5).to(dtype)
            if sep:
                wg = (torch.randn(H, K, device="cuda", generator=g) / K ** 0.5).to(dtype)
                wu = (torch.randn(H, K, device="cuda", generator=g) / K ** 0.5).to(dtype)
            else:
                W = (torch.randn(2 * H, K, device="cuda", generator=g) / K ** 0.5).to(dtype)
                wg, wu = W[:H], W[H:]
            bs = wu.data_ptr() - wg.data_ptr()
            out = torch.full((2, M, H), float("nan"), device="cuda", dtype=dtype)
            rc = -1
            if bs > 0 and bs % 16 == 0:
                rc = lin(x, wg, out, config=-1, batch=2, w_bs=bs // 2, out_bs=M * H)
            torch.cuda.synchronize()
            ok = rc == 0
            if ok:
                ref = torch.stack([x.double() @ wg.double().t(), x.double() @ wu.double().t()])
                rel = float((out.double() - ref).norm() / ref.norm())
                ok = rel < 8e-3
            n += 1
            fails += not ok
            log(f"  check batch=2 separate={sep} M={M} stride={bs}: {'ok' if ok else 'FAIL'} rc={rc}")
    # graph replay with new inputs
    M, N, K = 16, 2048, 16384
    x = torch.randn(M, K, device="cuda").to(torch.bfloat16)
    w = (torch.randn(N, K, device="cuda") / K ** 0.5).to(torch.bfloat16)
    r = torch.randn(M, N, device="cuda").to(torch.bfloat16)
    out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    lin(x, w, out, None, r)
    torch.cuda.synchronize()
    gr = torch.cuda.CUDAGraph()
    with torch.cuda.graph(gr):
        lin(x, w, out, None, r)
    ok = True
    for _ in range(3):
        x.copy_(torch.randn_like(x))
        out.fill_(float("nan"))
        gr.replay()
        torch.cuda.synchronize()
        ref = x.double() @ w.double().t() + r.double()
        ok &= float((out.double() - ref).norm() / ref.norm()) < 8e-3
    n += 1
    fails += not ok
    log(f"  check graph replay: {'ok' if ok else 'FAIL'}")
    log(f"checks: {n - fails}/{n} passed")
    return fails


def graph_time(fn, reps=20):
    fn()
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    g.replay()
    torch.cuda.synchronize()

    def once():
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        return a.elapsed_time(b) * 1000 / reps

    return once


def graph_rounds(cands, rounds=5, skip_failures=False):
    """Each candidate captured (graph_time) and replayed in `rounds` interleaved rounds:
    {name: [us per call, one per round]}. skip_failures: a candidate whose capture
    fails is logged and left out instead of raising."""
    timers = {}
    for k, f in cands.items():
        try:
            timers[k] = graph_time(f)
        except Exception as e:  # noqa: BLE001
            if not skip_failures:
                raise
            log(f"  {k}: failed {e}")
    samples = {k: [] for k in timers}
    for _ in range(rounds):
        for k, t in timers.items():
            samples[k].append(t())
    return samples


def read_bandwidth(copy=False):
    """Bytes/s of an int64 sum over 1 GiB (the read rate the weight-read floors use) and,
    with copy=True, of a 1 GiB device-to-device copy (read + write bytes): medians of 10
    graph replays of 5 calls each."""
    big = torch.empty(1 << 30, dtype=torch.uint8, device="cuda").random_()
    rd = graph_time(lambda: big.view(torch.int64).sum(), reps=5)
    bw_read = (1 << 30) / (statistics.median(rd() for _ in range(10)) * 1e-6)
    if not copy:
        log(f"read bandwidth (int64 sum of 1 GiB): {bw_read / 1e12:.3f} TB/s")
        return bw_read
    dst = torch.empty_like(big)
    cp = graph_time(lambda: dst.copy_(big), reps=5)
    bw_copy = 2 * (1 << 30) / (statistics.median(cp() for _ in range(10)) * 1e-6)
    log(f"read bandwidth (int64 sum of 1 GiB): {bw_read / 1e12:.3f} TB/s; copy: {bw_copy / 1e12:.3f} TB/s")
    return bw_read, bw_copy


def bench(lin, gemm):
    res = {}
    bw_read, bw_copy = read_bandwidth(copy=True)
    res["bw_read"], res["bw_copy"] = bw_read, bw_copy
    bf = torch.bfloat16
    for name, d, H in (("gemma2b", 2048, 16384), ("gemma7b", 3072, 24576)):
        wg = torch.randn(H, d, device="cuda").mul_(d ** -0.5).to(bf)
        wu = torch.randn(H, d, device="cuda").mul_(d ** -0.5).to(bf)
        wm = torch.cat([wg, wu])
        wd = torch.randn(d, H, device="cuda").mul_(H ** -0.5).to(bf)
        for M in (1, 16, 64):
            x = torch.randn(M, d, device="cuda").to(bf)
            h = torch.randn(M, H, device="cuda").to(bf)
            r = torch.randn(M, d, device="cuda").to(bf)
            y = torch.empty(M, d, device="cuda", dtype=bf)
            hh = torch.empty(M, H, device="cuda", dtype=bf)
            gu = torch.empty(2, M, H, device="cuda", dtype=bf)
            cands = {
                "down cuBLAS addmm": lambda: torch.addmm(r, h, wd.t(), out=y),
                "down cuBLAS mm": lambda: torch.mm(h, wd.t(), out=y),
            }
            down_cfgs = {f"{lin.names[c]} heuristic": c for c in range(lin.n)}
            for c in (0, 3):
                down_cfgs[f"{lin.names[c]} streamk atomic"] = c | (1 << 8) | (1 << 20)
                for s in (4, 8, 12, 16):
                    down_cfgs[f"{lin.names[c]} splitk {s}"] = c | (2 << 8) | (s << 12)
                    down_cfgs[f"{lin.names[c]} splitk {s} atomic"] = c | (2 << 8) | (s << 12) | (1 << 20)
            for k, cfg in down_cfgs.items():
                cands[f"down ours {k} +res"] = (lambda cfg=cfg: lin(h, wd, y, None, r, cfg))
            cands["gate/up cuBLAS merged mm"] = lambda: torch.mm(x, wm.t())
            for c in (0, 3):
                cands[f"gate/up engine {gemm.names[c]}"] = (lambda c=c: gemm(x, wg, wu, None, None, hh, True, c))
            bs = (wu.data_ptr() - wg.data_ptr()) // 2
            if bs > 0 and M in (1, 16):
                for c in (0, 4):
                    cands[f"gate/up ours batch2 {lin.names[c]} (pre-act only)"] = (
                        lambda c=c: lin(x, wg, gu, config=c, batch=2, w_bs=bs, out_bs=M * H))
            samples = graph_rounds(cands, skip_failures=True)
            wbytes_down = d * H * 2
            wbytes_gu = 2 * d * H * 2
            log(f"{name} M={M}: floor (read bw) down {wbytes_down / bw_read * 1e6:.1f} us, gate/up {wbytes_gu / bw_read * 1e6:.1f} us")
            for k, v in samples.items():
                med = statistics.median(v)
                wb = wbytes_down if k.startswith("down") else wbytes_gu
                log(f"  {k:60s} {med:8.1f} us  ({min(v):.1f}-{max(v):.1f})  {wb / (med * 1e-6) / 1e12:.2f} TB/s = "
                    f"{wb / (med * 1e-6) / bw_read:.0%} of read, {wb / (med * 1e-6) / bw_copy:.0%} of copy")
                res[f"{name} M={M} {k}"] = med
    return res


def probe(lin, gemm):
    """One launch of each decode GEMM at Gemma-7B, 16 tokens, for Nsight Compute
    (after one warm-up launch of each, outside the profiled range)."""
    bf = torch.bfloat16
    M, d, H = 16, 3072, 24576
    wg = torch.randn(H, d, device="cuda").mul_(d ** -0.5).to(bf)
    wu = torch.randn(H, d, device="cuda").mul_(d ** -0.5).to(bf)
    wm = torch.cat([wg, wu])
    wd = torch.randn(d, H, device="cuda").mul_(H ** -0.5).to(bf)
    x, h, r = (torch.randn(M, n, device="cuda").to(bf) for n in (d, H, d))
    y = torch.empty(M, d, device="cuda", dtype=bf)
    hh = torch.empty(M, H, device="cuda", dtype=bf)
    calls = [
        ("gate/up cuBLAS merged mm", lambda: torch.mm(x, wm.t())),
        ("gate/up engine 3", lambda: gemm(x, wg, wu, None, None, hh, True, 3)),
        ("gate/up engine 0", lambda: gemm(x, wg, wu, None, None, hh, True, 0)),
        ("down cuBLAS addmm", lambda: torch.addmm(r, h, wd.t(), out=y)),
        ("down ours stream-K", lambda: lin(h, wd, y, None, r, 0)),
        ("down ours split-K 4", lambda: lin(h, wd, y, None, r, 0 | (2 << 8) | (4 << 12))),
    ]
    for _, f in calls:
        f()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for name, f in calls:
        torch.cuda.nvtx.range_push(name)
        f()
        torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--probe", action="store_true", help="one launch each, for ncu --profile-from-start off")
    ap.add_argument("--out", default=".")
    ap.add_argument("--no-bench", action="store_true")
    ap.add_argument("--gemm-lib", default=os.path.join(ROOT, ".sm90dev", "libgeglu_gemm_sm90.so"))
    a = ap.parse_args()
    import sys
    sys.path.insert(0, os.path.join(ROOT, "tools", "sm90_gemm"))
    from check_and_bench import Lib

    lin = Linear(os.path.join(ROOT, ".sm90dev", "liblinear_sm90.so"))
    gemm = Lib(a.gemm_lib)
    if a.probe:
        return probe(lin, gemm)
    log(f"{datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC, {torch.cuda.get_device_name()}, torch {torch.__version__}")
    fails = check(lin)
    res = {} if a.no_bench else bench(lin, gemm)
    save_results(a.out, "linear_sm90_h100", res)
    raise SystemExit(1 if fails else 0)


if __name__ == "__main__":
    main()
