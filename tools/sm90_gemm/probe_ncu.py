"""The decode kernel after cuBLAS's down GEMM and after the engine, for ncu --cache-control none."""
import os

import torch

from check_and_bench import Lib
from check_decode import Decode
from harness import ROOT

dec = Decode(os.environ.get("DECODE_LIB", os.path.join(ROOT, ".sm90dev", "libdecode_sm90.so")))
gemm = Lib(os.path.join(ROOT, ".sm90dev", "libgeglu_gemm_sm90.so"))
bf = torch.bfloat16
d, H, M = 3072, 24576, 1
wm = torch.randn(2 * H, d, device="cuda").mul_(d ** -0.5).to(bf)
wd = torch.randn(d, H, device="cuda").mul_(H ** -0.5).to(bf)
x = torch.randn(M, d, device="cuda").to(bf)
r = torch.randn(M, d, device="cuda").to(bf)
hh = torch.empty(M, H, device="cuda", dtype=bf)
for prev in ("addmm", "engine", "addmm", "engine"):
    if prev == "addmm":
        torch.addmm(r, hh, wd.t())
    else:
        gemm(x, wm[:H], wm[H:], None, None, hh, True, 3)
    dec.gate_up(x, wm[:H], wm[H:], hh)
torch.cuda.synchronize()
