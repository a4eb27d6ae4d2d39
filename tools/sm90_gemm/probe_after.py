"""How long cuBLAS's down GEMM takes right after each gate/up kernel (events around it)."""
import os
import statistics
import sys

import torch

from check_and_bench import Lib
from check_decode import Decode
from harness import ROOT

dec = Decode(os.environ.get("DECODE_LIB", os.path.join(ROOT, ".sm90dev", "libdecode_sm90.so")))
gemm = Lib(os.path.join(ROOT, ".sm90dev", "libgeglu_gemm_sm90.so"))
bf = torch.bfloat16
d, H = (3072, 24576) if "7b" in sys.argv else (2048, 16384)
wm = torch.randn(2 * H, d, device="cuda").mul_(d ** -0.5).to(bf)
wg, wu = wm[:H], wm[H:]
wd = torch.randn(d, H, device="cuda").mul_(H ** -0.5).to(bf)
for M in (1, 8) if "plain" in sys.argv else ():
    x = torch.randn(M, d, device="cuda").to(bf)
    r = torch.randn(M, d, device="cuda").to(bf)
    hh = torch.empty(M, H, device="cuda", dtype=bf)
    h2 = torch.empty(M, H, device="cuda", dtype=bf)
    firsts = {
        "decode": lambda: dec.gate_up(x, wg, wu, hh),
        "engine": lambda: gemm(x, wg, wu, None, None, hh, True, 3),
        "decode+copy": lambda: (dec.gate_up(x, wg, wu, h2), hh.copy_(h2)),
        "cuBLAS mm": lambda: torch.mm(x, wm.t()),
        "nothing": lambda: None,
    }
    for name, first in firsts.items():
        ts = []
        for i in range(60):
            first()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            torch.addmm(r, hh, wd.t())
            b.record()
            b.synchronize()
            if i >= 10:
                ts.append(a.elapsed_time(b) * 1000)
        print(f"M={M} addmm after {name:12s} {statistics.median(ts):7.1f} us ({min(ts):.1f}-{max(ts):.1f})", flush=True)

from check_linear import graph_time  # noqa: E402

for M in (1,):
    x = torch.randn(M, d, device="cuda").to(bf)
    r = torch.randn(M, d, device="cuda").to(bf)
    hh = torch.empty(M, H, device="cuda", dtype=bf)
    h2 = torch.empty(M, H, device="cuda", dtype=bf)
    y = torch.empty(M, d, device="cuda", dtype=bf)
    cands = {
        "decode": lambda: dec.gate_up(x, wg, wu, hh),
        "engine": lambda: gemm(x, wg, wu, None, None, hh, True, 3),
        "addmm": lambda: torch.addmm(r, hh, wd.t(), out=y),
        "decode+addmm": lambda: (dec.gate_up(x, wg, wu, hh), torch.addmm(r, hh, wd.t(), out=y)),
        "engine+addmm": lambda: (gemm(x, wg, wu, None, None, hh, True, 3), torch.addmm(r, hh, wd.t(), out=y)),
        "decode(h2)+addmm(hh)": lambda: (dec.gate_up(x, wg, wu, h2), torch.addmm(r, hh, wd.t(), out=y)),
        "decode+add+addmm": lambda: (dec.gate_up(x, wg, wu, hh), r.add_(0), torch.addmm(r, hh, wd.t(), out=y)),
        "cuBLAS mm+addmm": lambda: (torch.mm(x, wm.t()), torch.addmm(r, hh, wd.t(), out=y)),
    }
    only = os.environ.get("CANDS")
    if only:
        cands = {k: cands[k] for k in only.split(",")}
    timers = {k: graph_time(f) for k, f in cands.items()}
    res = {k: [] for k in cands}
    for _ in range(5):
        for k, t in timers.items():
            res[k].append(t())
    for k, v in res.items():
        print(f"graph M={M} {k:24s} {statistics.median(v):7.1f} us", flush=True)
