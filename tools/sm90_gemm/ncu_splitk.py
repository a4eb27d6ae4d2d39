"""One launch of the split-K swap-AB down projection (check_linear_swapab.py's library) at
Gemma-7B sizes after a warm-up call, for Nsight Compute:

    ncu --set full --import-source yes --kernel-name-base demangled -k regex:SplitK -c 1 \
        python tools/sm90_gemm/ncu_splitk.py [--m M] [--lib PATH]
"""

import argparse
import os

import torch

from check_linear_swapab import SplitK
from harness import ROOT

ap = argparse.ArgumentParser()
ap.add_argument("--lib", default=os.path.join(ROOT, ".sm90dev", "liblinear_swapab_sm90.so"))
ap.add_argument("--m", type=int, default=16)
a = ap.parse_args()
lin = SplitK(a.lib)
d, H, bf = 3072, 24576, torch.bfloat16
wd = torch.randn(d, H, device="cuda").mul_(H ** -0.5).to(bf)
h = torch.randn(a.m, H, device="cuda").to(bf)
y = torch.empty(a.m, d, device="cuda", dtype=bf)
for _ in range(2):
    assert lin(h, wd, y) == 0
torch.cuda.synchronize()
