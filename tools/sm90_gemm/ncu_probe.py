"""One launch each of a few GEMMs at one shape, for Nsight Compute:

    ncu --clock-control none -k regex:'device_kernel|gemm|nvjet|xmma' --section SpeedOfLight \
        --metrics lts__t_sector_hit_rate.pct,dram__bytes_read.sum,dram__bytes_write.sum \
        python tools/sm90_gemm/ncu_probe.py --shape gemma7b --configs 1,2

Launch order: cuBLAS merged torch.mm, then each config (tanh, no bias).
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_and_bench import SHAPES, Lib, ROOT, make_inputs  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="gemma7b")
    ap.add_argument("--configs", default="1,2")
    ap.add_argument("--lib", default=os.path.join(ROOT, ".sm90dev", "libgeglu_gemm_sm90.so"))
    a = ap.parse_args()
    lib = Lib(a.lib)
    M, K, H = SHAPES[a.shape]
    x, wg, wu, _, _ = make_inputs(M, K, H, torch.bfloat16, False, "merged", 0, 3)
    W = torch.cat([wg, wu])
    wg, wu = W[:H], W[H:]
    out = torch.empty(M, H, device="cuda", dtype=torch.bfloat16)
    torch.mm(x, W.t())
    for c in a.configs.split(","):
        c = int(c, 0)
        rc = lib(x, wg, wu, None, None, out, True, c)
        print(f"config {c:#x} {lib.names[c & 0xff]} rc={rc}", flush=True)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
