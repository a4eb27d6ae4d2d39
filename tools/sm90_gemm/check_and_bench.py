"""Correctness check and benchmark of the sm90 fused GeGLU GEMM (.sm90dev/libgeglu_gemm_sm90.so,
tools/sm90_gemm/build.sh: the tuning build, variants 0-11).

Loads the library with ctypes (no torch extension), checks it against a float64 reference
on fresh random inputs (output poisoned with NaN first), checks the launcher's unsupported
cases, then times it against cuBLAS (torch.mm of the merged [2H, K] weight) and eager
PyTorch at the issue's shapes.

    python tools/sm90_gemm/check_and_bench.py [--lib PATH] [--out DIR] [--quick] [--configs 0,1]
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import os
import platform
import sys
import time

import torch
import torch.nn.functional as F

from harness import ROOT, log, save_results

DTYPE_CODE = {torch.bfloat16: 0, torch.float16: 1}
SHAPES = {  # name: (M, K, H)
    "blog": (8192, 768, 3072),
    "gemma2b": (4096, 2048, 16384),
    "gemma7b": (4096, 3072, 24576),
}



class Lib:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        L = self.lib
        i64, vp, ci = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int
        L.geglu_gemm_sm90.argtypes = [vp, i64, i64, i64, vp, vp, i64, vp, vp, vp, i64, i64, ci, ci, ci, vp]
        L.geglu_gemm_sm90.restype = ci
        L.geglu_gemm_sm90_status_string.argtypes = [ci]
        L.geglu_gemm_sm90_status_string.restype = ctypes.c_char_p
        L.geglu_gemm_sm90_num_configs.restype = ci
        L.geglu_gemm_sm90_config_name.argtypes = [ci]
        L.geglu_gemm_sm90_config_name.restype = ctypes.c_char_p
        L.geglu_gemm_sm90_pick_config.argtypes = [i64, i64, i64, ci]
        L.geglu_gemm_sm90_pick_config.restype = ci
        self.num_configs = L.geglu_gemm_sm90_num_configs()
        self.names = [L.geglu_gemm_sm90_config_name(i).decode() for i in range(self.num_configs)]

    def status(self, rc):
        return self.lib.geglu_gemm_sm90_status_string(rc).decode()

    def raw(self, x, M, K, ldx, wg, wu, ldw, bg, bu, out, H, ldo, dtype_code, approximate, config, stream=None):
        if stream is None:
            stream = torch.cuda.current_stream().cuda_stream
        return self.lib.geglu_gemm_sm90(x, M, K, ldx, wg, wu, ldw, bg, bu, out, H, ldo,
                                        dtype_code, int(approximate), config, stream)

    def __call__(self, x, wg, wu, bg, bu, out, approximate=True, config=-1):
        M, K = x.shape
        H = wg.shape[0]
        assert x.stride(1) == 1 and wg.stride(1) == 1 and wu.stride(1) == 1 and out.stride(1) == 1
        assert wg.stride(0) == wu.stride(0)
        return self.raw(x.data_ptr(), M, K, x.stride(0), wg.data_ptr(), wu.data_ptr(), wg.stride(0),
                        bg.data_ptr() if bg is not None else None, bu.data_ptr() if bu is not None else None,
                        out.data_ptr(), H, out.stride(0), DTYPE_CODE[x.dtype], approximate, config)


def reference(x, wg, wu, bg, bu, approximate):
    xd, g, u = x.double(), wg.double(), wu.double()
    a = xd @ g.t()
    b = xd @ u.t()
    if bg is not None:
        a = a + bg.double()
    if bu is not None:
        b = b + bu.double()
    return F.gelu(a, approximate="tanh" if approximate else "none") * b


def make_inputs(M, K, H, dtype, bias, layout, ldx_pad=0, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x_full = torch.randn(M, K + ldx_pad, device="cuda", generator=g).mul_(0.5).to(dtype)
    x = x_full[:, :K]
    scale = 1.0 / K ** 0.5 * 2.0
    if layout == "merged":  # one [2H, K] weight: Wu = Wg + H*K
        W = (torch.randn(2 * H, K, device="cuda", generator=g) * scale).to(dtype)
        wg, wu = W[:H], W[H:]
    elif layout == "swapped":  # up rows first in memory: Wu - Wg negative
        W = (torch.randn(2 * H, K, device="cuda", generator=g) * scale).to(dtype)
        wu, wg = W[:H], W[H:]
    else:  # two separate allocations
        wg = (torch.randn(H, K, device="cuda", generator=g) * scale).to(dtype)
        wu = (torch.randn(H, K, device="cuda", generator=g) * scale).to(dtype)
    bg = bu = None
    if bias:
        bg = (torch.randn(H, device="cuda", generator=g) * 0.5).to(dtype)
        bu = (torch.randn(H, device="cuda", generator=g) * 0.5).to(dtype)
    return x, wg, wu, bg, bu


def check_case(lib, M, K, H, dtype, approximate, bias, layout, config, ldx_pad=0, ldo_pad=0, seed=0):
    x, wg, wu, bg, bu = make_inputs(M, K, H, dtype, bias, layout, ldx_pad, seed)
    out_full = torch.full((M, H + ldo_pad), float("nan"), device="cuda", dtype=dtype)
    out = out_full[:, :H]
    rc = lib(x, wg, wu, bg, bu, out, approximate, config)
    torch.cuda.synchronize()
    if rc != 0:
        return False, f"rc={rc} ({lib.status(rc)})", None
    ref = reference(x, wg, wu, bg, bu, approximate)
    o = out.double()
    nan = int(torch.isnan(o).sum())
    pad_ok = True
    if ldo_pad:
        pad_ok = bool(torch.isnan(out_full[:, H:]).all())
    rel = float((o - ref).norm() / ref.norm()) if nan == 0 else float("nan")
    # bf16/fp16 rounding of the output alone gives ~2e-3 / 3e-4 relative.
    tol = 8e-3 if dtype == torch.bfloat16 else 2e-3
    ok = nan == 0 and rel < tol and pad_ok
    return ok, f"rel={rel:.2e} nan={nan} pad_ok={pad_ok}", rel


def run_checks(lib, configs, quick):
    results = []
    fails = 0
    bf, fp = torch.bfloat16, torch.float16
    # (M, K, H, dtype, approximate, bias, layout, ldx_pad, ldo_pad)
    cases = [
        (1, 64, 64, bf, True, False, "merged", 0, 0),
        (7, 136, 200, bf, False, True, "separate", 0, 0),
        (64, 768, 3072, fp, True, True, "swapped", 0, 0),
        (1000, 1000, 1000, bf, True, True, "separate", 24, 8),
        (1000, 1000, 1001, fp, False, True, "merged", 0, 7),
        (4096, 64, 24576, bf, False, False, "merged", 0, 0),
        (1000, 24576, 72, fp, True, True, "separate", 0, 0),
        (8192, 768, 3072, bf, True, False, "merged", 0, 0),
        (8192, 768, 3072, fp, False, True, "separate", 0, 0),
        (129, 3072, 24576, bf, True, True, "swapped", 8, 0),
        (4096, 2048, 16384, bf, True, False, "merged", 0, 0),
        (4096, 3072, 24576, fp, False, False, "merged", 0, 0),
        (300, 520, 136, fp, True, False, "separate", 0, 0),
        (5, 8, 16, bf, True, True, "separate", 0, 0),
        (9, 16, 1, fp, False, True, "merged", 8, 7),
        (130, 24, 9, bf, True, True, "swapped", 0, 7),
    ]
    if quick:
        cases = cases[:5] + cases[7:8]
    # every flag combination on one mid-size shape
    full = []
    for dt in (bf, fp):
        for ap in (True, False):
            for bias in (False, True):
                for layout in ("merged", "separate", "swapped"):
                    full.append((257, 392, 328, dt, ap, bias, layout, 0, 0))
    seed = 1
    for cfg in configs:
        for c in (cases if cfg == configs[0] else cases[:9] + full[::5]) + (full if cfg == configs[0] else []):
            M, K, H, dt, ap, bias, layout, lp, op = c
            seed += 1
            ok, msg, rel = check_case(lib, M, K, H, dt, ap, bias, layout, cfg, lp, op, seed)
            fails += not ok
            rec = dict(config=lib.names[cfg], M=M, K=K, H=H, dtype=str(dt).split(".")[-1], approximate=ap,
                       bias=bias, layout=layout, ldx_pad=lp, ldo_pad=op, ok=ok, rel=rel)
            results.append(rec)
            if not ok or M * K * H >= 4096 * 2048 * 16384 or c == cases[0]:
                log(f"  check cfg={cfg} M={M} K={K} H={H} {rec['dtype']} tanh={ap} bias={bias} {layout} "
                    f"ldx+{lp} ldo+{op}: {'ok' if ok else 'FAIL'} {msg}")
    log(f"checks: {len(results) - fails}/{len(results)} passed")
    return results, fails


def check_unsupported(lib):
    bf = torch.bfloat16
    x = torch.randn(64, 136, device="cuda").to(bf)
    W = torch.randn(256, 136, device="cuda").to(bf)
    out = torch.empty(64, 128, device="cuda", dtype=bf)
    p = lambda t: t.data_ptr()
    s = torch.cuda.current_stream().cuda_stream
    cases = {
        "K*2 % 16 != 0 (K=100)": (p(x), 64, 100, 136, p(W), p(W[128:]), 136, None, None, p(out), 128, 128, 0, 1, -1),
        "ldx*2 % 16 != 0": (p(x), 64, 128, 132, p(W), p(W[128:]), 136, None, None, p(out), 128, 128, 0, 1, -1),
        "x misaligned (+2 B)": (p(x) + 2, 64, 128, 136, p(W), p(W[128:]), 136, None, None, p(out), 128, 128, 0, 1, -1),
        "w_up misaligned (+2 B)": (p(x), 64, 128, 136, p(W), p(W[128:]) + 2, 136, None, None, p(out), 128, 128, 0, 1, -1),
        "out misaligned (+8 B)": (p(x), 64, 128, 136, p(W), p(W[128:]), 136, None, None, p(out) + 8, 120, 128, 0, 1, -1),
        "dtype float32 (code 2)": (p(x), 64, 128, 136, p(W), p(W[128:]), 136, None, None, p(out), 128, 128, 2, 1, -1),
        "ldo < H": (p(x), 64, 128, 136, p(W), p(W[128:]), 136, None, None, p(out), 128, 120, 0, 1, -1),
        "bias misaligned (+2 B)": (p(x), 64, 128, 136, p(W), p(W[128:]), 136, p(W) + 2, None, p(out), 128, 128, 0, 1, -1),
        "config out of range": (p(x), 64, 128, 136, p(W), p(W[128:]), 136, None, None, p(out), 128, 128, 0, 1, 99),
        "K = 0": (p(x), 64, 0, 136, p(W), p(W[128:]), 136, None, None, p(out), 128, 128, 0, 1, -1),
    }
    res = {}
    fails = 0
    for name, args in cases.items():
        rc = lib.lib.geglu_gemm_sm90(*args[:15], s)
        res[name] = rc
        fails += rc == 0
        log(f"  unsupported {name}: rc={rc} ({lib.status(rc)})")
    rc0 = lib.lib.geglu_gemm_sm90(p(x), 0, 128, 136, p(W), p(W[128:]), 136, None, None, p(out), 128, 128, 0, 1, -1, s)
    log(f"  M=0: rc={rc0}")
    res["M=0"] = rc0
    fails += rc0 != 0
    torch.cuda.synchronize()
    return res, fails


def check_graph(lib):
    M, K, H = 512, 768, 1024
    x, wg, wu, bg, bu = make_inputs(M, K, H, torch.bfloat16, True, "merged", 0, 123)
    out = torch.full((M, H), float("nan"), device="cuda", dtype=torch.bfloat16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        assert lib(x, wg, wu, bg, bu, out) == 0  # warm (sets attributes) outside capture
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    out.fill_(float("nan"))
    gph = torch.cuda.CUDAGraph()
    rcs = []
    with torch.cuda.graph(gph):
        rcs.append(lib(x, wg, wu, bg, bu, out))
    x.copy_(torch.randn_like(x, dtype=torch.float32).mul_(0.5).to(x.dtype))
    gph.replay()
    torch.cuda.synchronize()
    ref = reference(x, wg, wu, bg, bu, True)
    rel = float((out.double() - ref).norm() / ref.norm())
    ok = rcs == [0] and rel < 8e-3
    log(f"  cuda graph capture+replay (new x): rc={rcs} rel={rel:.2e} {'ok' if ok else 'FAIL'}")
    return ok


def bench(fn, warmup=50, rep=300):
    import triton.testing

    return triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median") * 1e3  # us


def run_bench(lib, configs, dtypes, sweep=(1, 2)):
    res = {}
    bf = torch.bfloat16
    a = torch.randn(8192, 8192, device="cuda").to(bf)
    b = torch.randn(8192, 8192, device="cuda").to(bf)
    t = bench(lambda: torch.mm(a, b))
    ceil = 2 * 8192 ** 3 / t / 1e6
    log(f"matmul ceiling bf16 8192^3: {t:.1f} us = {ceil:.1f} TFLOP/s")
    res["ceiling_bf16_8192"] = dict(us=t, tflops=ceil)
    del a, b
    for dt in dtypes:
        dname = str(dt).split(".")[-1]
        for name, (M, K, H) in SHAPES.items():
            flops = 2 * M * K * 2 * H
            x, wg, wu, _, _ = make_inputs(M, K, H, dt, False, "merged", 0, 7)
            W = torch.cat([wg, wu])  # contiguous merged weight (wg/wu are views of one anyway)
            wg, wu = W[:H], W[H:]
            out = torch.empty(M, H, device="cuda", dtype=dt)
            row = dict(M=M, K=K, H=H, dtype=dname)
            t_cublas = bench(lambda: torch.mm(x, W.t()))
            t_eager = bench(lambda: F.gelu(x @ wg.t(), approximate="tanh") * (x @ wu.t()))
            row["cublas_merged_us"] = t_cublas
            row["eager_us"] = t_eager
            line = (f"{dname} {name:8s} M={M} K={K} H={H}: cuBLAS merged {t_cublas:8.1f} us "
                    f"({flops / t_cublas / 1e6:6.1f} TF/s), eager {t_eager:8.1f} us")
            log(line)
            best = None
            for cfg in configs:
                rc = lib(x, wg, wu, None, None, out, True, cfg)
                if rc != 0:
                    log(f"    cfg {cfg} {lib.names[cfg]}: rc={rc} {lib.status(rc)}")
                    continue
                t = bench(lambda: lib(x, wg, wu, None, None, out, True, cfg))
                row[f"ours_tanh_cfg{cfg}_us"] = t
                log(f"    ours tanh cfg {cfg} {lib.names[cfg]:28s}: {t:8.1f} us {flops / t / 1e6:6.1f} TF/s "
                    f"x{t_cublas / t:.3f} vs cuBLAS, x{t_eager / t:.2f} vs eager")
                if best is None or t < best[1]:
                    best = (cfg, t)
            if best is not None:
                cfg = best[0]
                nostore = cfg | (1 << 16)  # the no-store bit
                ok = lib(x, wg, wu, None, None, out, True, nostore) == 0
                t_nostore = bench(lambda: lib(x, wg, wu, None, None, out, True, nostore)) if ok else float("nan")
                row["nostore_us"] = t_nostore
                t_exact = bench(lambda: lib(x, wg, wu, None, None, out, False, cfg))
                bg_ = torch.randn(H, device="cuda").to(dt)
                bu_ = torch.randn(H, device="cuda").to(dt)
                t_bias = bench(lambda: lib(x, wg, wu, bg_, bu_, out, True, cfg))
                # tile scheduler swizzle / raster order on the swept variants
                encs = [v | (sw << 8) | (ra << 12) for v in sweep for ra in (0, 1, 2) for sw in (0, 2, 3)
                        if (sw, ra) != (0, 0)]
                for enc in encs:
                    tt = bench(lambda: lib(x, wg, wu, None, None, out, True, enc))
                    row[f"ours_tanh_enc{enc:#x}_us"] = tt
                    log(f"    enc {enc:#06x}: {tt:8.1f} us x{t_cublas / tt:.3f} vs cuBLAS")
                    if tt < best[1]:
                        best = (enc, tt)
                cfg = best[0]
                auto = lib.lib.geglu_gemm_sm90_pick_config(M, K, H, DTYPE_CODE[dt])
                t_auto = bench(lambda: lib(x, wg, wu, None, None, out, True, -1))
                row["auto_us"] = t_auto
                row["auto_vs_cublas"] = t_cublas / t_auto
                row.update(best_config=f"{lib.names[cfg & 0xff]} enc={cfg:#x}", best_us=best[1], best_tflops=flops / best[1] / 1e6,
                           best_vs_cublas=t_cublas / best[1], best_vs_eager=t_eager / best[1],
                           exact_us=t_exact, bias_tanh_us=t_bias, auto_config=f"{lib.names[auto & 0xff]} enc={auto:#x}")
                log(f"    best: enc {cfg:#x} {lib.names[cfg & 0xff]} {best[1]:.1f} us = {flops / best[1] / 1e6:.1f} TF/s, "
                    f"x{t_cublas / best[1]:.3f} vs cuBLAS, x{t_eager / best[1]:.2f} vs eager; "
                    f"auto (-1) {t_auto:.1f} us x{t_cublas / t_auto:.3f}; no-store {t_nostore:.1f} us; exact {t_exact:.1f} us; tanh+bias {t_bias:.1f} us; auto picks {lib.names[auto & 0xff]} {auto:#x}")
            res[f"{dname}_{name}"] = row
            del x, W, wg, wu, out
            torch.cuda.empty_cache()
    return res


def run_small_bench(lib, configs):
    """Smaller M (decode / short prefill) at the gemma7b and blog widths: which variant wins."""
    res = {}
    dt = torch.bfloat16
    for (K, H) in ((3072, 24576), (768, 3072)):
        for M in (1, 16, 64, 256, 1024, 2048):
            flops = 2 * M * K * 2 * H
            x, wg, wu, _, _ = make_inputs(M, K, H, dt, False, "merged", 0, 11)
            W = torch.cat([wg, wu])
            wg, wu = W[:H], W[H:]
            out = torch.empty(M, H, device="cuda", dtype=dt)
            t_cublas = bench(lambda: torch.mm(x, W.t()), 25, 100)
            row = dict(M=M, K=K, H=H, cublas_merged_us=t_cublas)
            parts = []
            auto = lib.lib.geglu_gemm_sm90_pick_config(M, K, H, 0)
            for cfg in list(configs) + [auto | (1 << 20)]:
                c = cfg & ~(1 << 20)
                if lib(x, wg, wu, None, None, out, True, c) != 0:
                    continue
                t = bench(lambda: lib(x, wg, wu, None, None, out, True, c), 25, 100)
                key = "auto" if cfg >> 20 else str(cfg)
                row[f"ours_{key}_us"] = t
                parts.append(f"{key}:{t:.1f}")
            best = min((v, k) for k, v in row.items() if k.startswith("ours_") and k != "ours_auto_us")
            row["best"] = best[1]
            log(f"  small M={M:5d} K={K} H={H}: cuBLAS {t_cublas:8.1f} us ({flops / t_cublas / 1e6:5.1f} TF/s) | "
                + " ".join(parts) + f" | best {best[1]} x{t_cublas / best[0]:.3f}, auto x{t_cublas / row.get('ours_auto_us', float('nan')):.3f}")
            res[f"M{M}_K{K}_H{H}"] = row
    return res


def run_final(lib, dtypes, rounds=5, extra=(1, 2, 0x2301)):
    """Interleaved repeats (run-to-run spread on the H100 is ~2%): each round times every
    candidate once; the table reports the median over rounds."""
    import statistics

    res = {}
    for dt in dtypes:
        dname = str(dt).split(".")[-1]
        for name, (M, K, H) in SHAPES.items():
            flops = 2 * M * K * 2 * H
            x, wg, wu, _, _ = make_inputs(M, K, H, dt, False, "merged", 0, 21)
            W = torch.cat([wg, wu])
            wg, wu = W[:H], W[H:]
            out = torch.empty(M, H, device="cuda", dtype=dt)
            auto = lib.lib.geglu_gemm_sm90_pick_config(M, K, H, DTYPE_CODE[dt])
            fns = {
                "cublas_merged": lambda: torch.mm(x, W.t()),
                "eager": lambda: F.gelu(x @ wg.t(), approximate="tanh") * (x @ wu.t()),
                "ours_auto": lambda: lib(x, wg, wu, None, None, out, True, -1),
            }
            for e in extra:
                if e != auto:
                    fns[f"ours_{e:#x}"] = (lambda e=e: lib(x, wg, wu, None, None, out, True, e))
            for f in fns.values():  # warm
                f()
            torch.cuda.synchronize()
            times = {k: [] for k in fns}
            for _ in range(rounds):
                for k, f in fns.items():
                    times[k].append(bench(f, 25, 200))
            med = {k: statistics.median(v) for k, v in times.items()}
            spread = {k: (max(v) - min(v)) / statistics.median(v) for k, v in times.items()}
            tc = med["cublas_merged"]
            row = dict(M=M, K=K, H=H, dtype=dname, auto_config=f"{lib.names[auto & 0xff]} enc={auto:#x}",
                       median_us=med, spread=spread, rounds=times,
                       tflops={k: flops / v / 1e6 for k, v in med.items()},
                       vs_cublas={k: tc / v for k, v in med.items()},
                       vs_eager={k: med["eager"] / v for k, v in med.items()})
            res[f"{dname}_{name}"] = row
            log(f"FINAL {dname} {name:8s} (M={M} K={K} H={H}) auto={lib.names[auto & 0xff]} {auto:#x}")
            for k in fns:
                log(f"    {k:14s} {med[k]:8.1f} us {flops / med[k] / 1e6:6.1f} TF/s  x{tc / med[k]:.3f} vs cuBLAS"
                    f"  x{med['eager'] / med[k]:.2f} vs eager  (spread {100 * spread[k]:.1f}%)")
            del x, W, wg, wu, out
            torch.cuda.empty_cache()
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=os.path.join(ROOT, ".sm90dev", "libgeglu_gemm_sm90.so"))
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--configs", default="")
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--no-bench", action="store_true")
    ap.add_argument("--fp16-bench", action="store_true")
    ap.add_argument("--tag", default="gemm_sm90_h100")
    ap.add_argument("--final", action="store_true", help="interleaved repeated timing, bf16 and fp16")
    ap.add_argument("--sweep", default="1,2", help="variants whose scheduler swizzle/raster are swept")
    ap.add_argument("--small-bench", default="", help="variants to time at small M, e.g. 0,1,2")
    args = ap.parse_args()

    lib = Lib(args.lib)
    configs = [int(c) for c in args.configs.split(",") if c] or list(range(lib.num_configs))
    props = torch.cuda.get_device_properties(0)
    meta = dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                device=props.name, sm_count=props.multi_processor_count, torch=torch.__version__,
                cuda=torch.version.cuda, python=platform.python_version(), configs=lib.names)
    try:
        import triton

        meta["triton"] = triton.__version__
    except Exception:
        pass
    log(json.dumps(meta))
    result = dict(meta=meta)
    fails = 0
    t0 = time.time()
    if not args.no_check:
        checks, f1 = run_checks(lib, configs, args.quick)
        unsup, f2 = check_unsupported(lib)
        g_ok = check_graph(lib)
        fails += f1 + f2 + (not g_ok)
        result.update(checks=checks, unsupported=unsup, graph_ok=g_ok)
        log(f"check time {time.time() - t0:.1f} s, failures {fails}")
    if not args.no_bench:
        dts = [torch.bfloat16] + ([torch.float16] if args.fp16_bench else [])
        result["bench"] = run_bench(lib, configs, dts, [int(c) for c in args.sweep.split(",") if c])
        if args.final:
            result["final"] = run_final(lib, [torch.bfloat16, torch.float16])
        if args.small_bench:
            result["small_bench"] = run_small_bench(lib, [int(c) for c in args.small_bench.split(",")])
    result["failures"] = fails
    save_results(args.out, args.tag, result)
    log(f"total {time.time() - t0:.1f} s; failures {fails}")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
