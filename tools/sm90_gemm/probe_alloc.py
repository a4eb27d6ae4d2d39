"""Does the decode kernel's time depend on where the weights sit? Several allocations."""
import os
import statistics

import torch

from check_and_bench import Lib
from check_decode import Decode
from check_linear import graph_time
from harness import ROOT

dec = Decode(os.path.join(ROOT, ".sm90dev", "libdecode_sm90.so"))
gemm = Lib(os.path.join(ROOT, ".sm90dev", "libgeglu_gemm_sm90.so"))
bf = torch.bfloat16
d, H, M = 3072, 24576, 1
import sys

keep = []
if "wd" in sys.argv and "first" not in sys.argv:
    keep.append(torch.randn(d, H, device="cuda").to(bf))
for alloc in range(4):
    if alloc or "first" not in sys.argv:
        keep.append(torch.empty(int(37e6) * (alloc + 1), dtype=torch.uint8, device="cuda"))  # shift the next allocation
    wm = torch.randn(2 * H, d, device="cuda").mul_(d ** -0.5).to(bf)
    if "wd_after" in sys.argv:
        keep.append(torch.randn(d, H, device="cuda").to(bf))
    wg, wu = wm[:H], wm[H:]
    wsep = wm[H:].clone()
    x = torch.randn(M, d, device="cuda").to(bf)
    hh = torch.empty(M, H, device="cuda", dtype=bf)
    if "plain" in sys.argv:
        for _ in range(60):
            dec.gate_up(x, wg, wu, hh)
            torch.addmm(x, hh, keep[-1].t()) if "wd" in sys.argv or "wd_after" in sys.argv else None
        torch.cuda.synchronize()
    cands = {
        "decode": lambda: dec.gate_up(x, wg, wu, hh),
        "decode sep": lambda: dec.gate_up(x, wg, wsep, hh),
        "engine": lambda: gemm(x, wg, wu, None, None, hh, True, 3),
        "mm": lambda: torch.mm(x, wm.t()),
    }
    timers = {k: graph_time(f) for k, f in cands.items()}
    res = {k: [] for k in cands}
    for _ in range(5):
        for k, t in timers.items():
            res[k].append(t())
    print(f"alloc {alloc} wm at {wm.data_ptr():#x}: " + ", ".join(f"{k} {statistics.median(v):.1f}" for k, v in res.items()),
          flush=True)
    del wm, wg, wu, wsep, timers
