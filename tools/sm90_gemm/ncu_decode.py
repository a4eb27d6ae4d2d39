"""One launch each of the MLP's decode kernels at Gemma-7B sizes, as the op runs them at
1-4 tokens: the swap-AB gate/up (check_swap.py's library), then the decode linear
(check_decode.py's) on its output, for Nsight Compute (the CUTLASS kernel's own name is
cutlass::device_kernel: its template arguments, in the demangled name, say which):

    ncu --set full --kernel-name-base demangled -k regex:"decode_linear|geglu_swapab" \
        python tools/sm90_gemm/ncu_decode.py [--m M]
"""

import argparse
import os

import torch

from check_decode import Decode
from check_swap import Swap
from harness import ROOT

ap = argparse.ArgumentParser()
ap.add_argument("--lib", default=os.path.join(ROOT, ".sm90dev", "libdecode_sm90.so"))
ap.add_argument("--swap-lib", default=os.path.join(ROOT, ".sm90dev", "libgeglu_swapab_sm90.so"))
ap.add_argument("--m", type=int, default=1)
a = ap.parse_args()
dec, swap = Decode(a.lib), Swap(a.swap_lib)
d, H, bf = 3072, 24576, torch.bfloat16
wm = torch.randn(2 * H, d, device="cuda").mul_(d ** -0.5).to(bf)
wd = torch.randn(d, H, device="cuda").mul_(H ** -0.5).to(bf)
x = torch.randn(a.m, d, device="cuda").to(bf)
h = torch.empty(a.m, H, device="cuda", dtype=bf)
y = torch.empty(a.m, d, device="cuda", dtype=bf)
assert swap(x, wm[:H], wm[H:], h) == 0
if a.m <= 4:  # the linear's token limit
    assert dec.linear(h, wd, y) == 0
torch.cuda.synchronize()
