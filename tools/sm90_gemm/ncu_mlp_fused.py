"""One launch of the one-kernel decode MLP (check_mlp_fused.py's library) at Gemma-7B
sizes after a warm-up call, for Nsight Compute:

    ncu --clock-control none --section SpeedOfLight --section WarpStateStats -k regex:device_kernel \
        -c 1 python tools/sm90_gemm/ncu_mlp_fused.py [--m M] [--lib PATH]
"""

import argparse
import os

import torch

from check_mlp_fused import Fused
from harness import ROOT

ap = argparse.ArgumentParser()
ap.add_argument("--lib", default=os.path.join(ROOT, ".sm90dev", "libmlp_fused_sm90.so"))
ap.add_argument("--m", type=int, default=16)
a = ap.parse_args()
fused = Fused(a.lib)
d, H, bf = 3072, 24576, torch.bfloat16
x = torch.randn(a.m, d, device="cuda").to(bf)
wg = torch.randn(H, d, device="cuda").mul_(d ** -0.5).to(bf)
wu = torch.randn(H, d, device="cuda").mul_(d ** -0.5).to(bf)
wd = torch.randn(d, H, device="cuda").mul_(H ** -0.5).to(bf)
h = torch.empty(a.m, H, device="cuda", dtype=bf)
y = torch.empty(a.m, d, device="cuda", dtype=bf)
for _ in range(2):
    assert fused(x, wg, wu, wd, h, y) == 0
torch.cuda.synchronize()
