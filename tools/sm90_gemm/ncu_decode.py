"""One launch of each decode kernel (check_decode.py's library) at Gemma-7B sizes, the
gate/up and then the down projection on its output, as the op runs them, for Nsight
Compute:

    ncu --set full -k regex:decode_ python tools/sm90_gemm/ncu_decode.py [--m M] [--lib PATH]
"""

import argparse
import os

import torch

from check_decode import Decode
from harness import ROOT

ap = argparse.ArgumentParser()
ap.add_argument("--lib", default=os.path.join(ROOT, ".sm90dev", "libdecode_sm90.so"))
ap.add_argument("--m", type=int, default=1)
a = ap.parse_args()
dec = Decode(a.lib)
d, H, bf = 3072, 24576, torch.bfloat16
wm = torch.randn(2 * H, d, device="cuda").mul_(d ** -0.5).to(bf)
wd = torch.randn(d, H, device="cuda").mul_(H ** -0.5).to(bf)
x = torch.randn(a.m, d, device="cuda").to(bf)
h = torch.empty(a.m, H, device="cuda", dtype=bf)
y = torch.empty(a.m, d, device="cuda", dtype=bf)
assert dec.gate_up(x, wm[:H], wm[H:], h) == 0
assert dec.linear(h, wd, y) == 0
torch.cuda.synchronize()
