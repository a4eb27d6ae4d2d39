"""One launch each of the prefill GEMMs of the MLP, for Nsight Compute.

The product's routes (loaded through `kernels`, as users load them) beside the cuBLAS
GEMMs they are measured against, bf16, fresh random inputs, each warmed up first; only
the launches between cudaProfilerStart/Stop are profiled:

    ncu --profile-from-start off --clock-control none --section SpeedOfLight \
        --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
        --section WarpStateStats --section Occupancy \
        python benchmarks/ncu_prefill_gemms.py

Launch order (NVTX ranges name them): per gate/up shape, cuBLAS's GEMM of the merged
[2H, K] weight, then the engine (`_geglu_linear`, tanh); per bias + GELU shape,
`F.linear` (no GELU), cuBLASLt's `_addmm_activation` (tanh), then the engine, tanh and
exact (`_linear_bias_gelu`).

`--fp8`: the FP8 MLP at the Gemma-7B prefill shape instead: cuBLASLt's two rowwise-scaled
`torch._scaled_mm` GEMMs on operands quantized beforehand (the "FP8 GEMMs alone" of
benchmarks/compare_fp8_mlp.py), then `geglu_mlp_fp8` (x's quantization, the block-scaled
gate/up with h quantized in its epilogue, the down GEMM).
"""

import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parent.parent
DT = torch.bfloat16
GATE_UP = {"gemma7b": (4096, 3072, 24576), "gemma2b_8192": (8192, 2048, 16384)}  # tokens, dim, hidden
BIAS_GELU = {"bert_large": (8192, 1024, 4096)}  # tokens, in, out


def fp8_launches(geglu, g):
    """The FP8 MLP at the Gemma-7B prefill shape: cuBLASLt's FP8 GEMMs alone, then ours."""
    e4m3 = torch.float8_e4m3fn
    m, d, h = GATE_UP["gemma7b"]

    def blocks(w):  # e4m3 with a float32 scale per 128x128 block
        r, c = w.shape
        b = w.float().reshape(r // 128, 128, c // 128, 128)
        scale = b.abs().amax(dim=(1, 3)) / 448.0
        return (b / scale[:, None, :, None]).to(e4m3).reshape(r, c), scale.contiguous()

    def rowwise(v):
        scale = v.abs().amax(dim=-1, keepdim=True).float() / 448.0
        return (v.float() / scale).to(e4m3), scale

    x = torch.randn(m, d, device="cuda", dtype=DT, generator=g)
    wg, wu = (torch.randn(h, d, device="cuda", dtype=DT, generator=g) * d**-0.5 for _ in range(2))
    wd = torch.randn(d, h, device="cuda", dtype=DT, generator=g) * h**-0.5
    (qg, sg), (qu, su), (qd, sd) = blocks(wg), blocks(wu), blocks(wd)
    wgu_q, wgu_s = rowwise(torch.cat([wg, wu]))
    wd_q, wd_s = rowwise(wd)
    xq, xs = rowwise(x)
    hq, hs = rowwise(torch.randn(m, h, device="cuda", dtype=DT, generator=g))
    return [
        ("gemma7b cuBLASLt FP8 gate/up", lambda: torch._scaled_mm(xq, wgu_q.T, scale_a=xs, scale_b=wgu_s.T, out_dtype=DT)),
        ("gemma7b cuBLASLt FP8 down", lambda: torch._scaled_mm(hq, wd_q.T, scale_a=hs, scale_b=wd_s.T, out_dtype=DT)),
        ("gemma7b geglu_mlp_fp8", lambda: geglu.geglu_mlp_fp8(x, qg, sg, qu, su, qd, sd)),
    ]


def main() -> int:
    from kernels import get_kernel

    os.environ["LOCAL_KERNELS"] = f"org/geglu={REPO}"
    geglu = get_kernel("org/geglu", version=1)
    ops = geglu._ops.ops
    g = torch.Generator(device="cuda").manual_seed(0)
    launches = []
    if "--fp8" in sys.argv[1:]:
        return profile(fp8_launches(geglu, g))
    for name, (m, d, h) in GATE_UP.items():
        x = torch.randn(m, d, device="cuda", dtype=DT, generator=g)
        w = torch.randn(2 * h, d, device="cuda", dtype=DT, generator=g) * d**-0.5
        launches += [
            (f"{name} cuBLAS merged gate/up", lambda x=x, w=w: F.linear(x, w)),
            (f"{name} engine gate/up + GeGLU", lambda x=x, w=w, h=h: ops._geglu_linear(x, w[:h], w[h:], None, None, "tanh")),
        ]
    for name, (m, k, n) in BIAS_GELU.items():
        x = torch.randn(m, k, device="cuda", dtype=DT, generator=g)
        w = torch.randn(n, k, device="cuda", dtype=DT, generator=g) * k**-0.5
        b = torch.randn(n, device="cuda", dtype=DT, generator=g)
        launches += [
            (f"{name} F.linear", lambda x=x, w=w, b=b: F.linear(x, w, b)),
            (f"{name} cuBLASLt addmm_activation", lambda x=x, w=w, b=b: torch._addmm_activation(b, x, w.t(), use_gelu=True)),
            (f"{name} engine bias + tanh GELU", lambda x=x, w=w, b=b: ops._linear_bias_gelu(x, w, b, "tanh")),
            (f"{name} engine bias + exact GELU", lambda x=x, w=w, b=b: ops._linear_bias_gelu(x, w, b, "none")),
        ]
    return profile(launches)


def profile(launches) -> int:
    for _, fn in launches:  # warm-up: param caches, cuBLAS heuristics, lazy module loads
        fn()
        fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for label, fn in launches:
        torch.cuda.nvtx.range_push(label)
        fn()
        torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize()
        print(f"launched: {label}", flush=True)
    torch.cuda.cudart().cudaProfilerStop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
