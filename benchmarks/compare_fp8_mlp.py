"""FP8 GeGLU MLP benchmark: the block-scaled FP8 MLP (geglu_mlp_fp8) beside the bf16 ones,
on one GPU, one process, the same inputs for every variant.

    python -m tools.build && python benchmarks/compare_fp8_mlp.py

Rows (tokens: dim -> hidden), microseconds, do_bench medians after warm-up, the median of
ROUNDS interleaved rounds (every round in the JSON):
- bf16 eager: F.linear x3 and gelu(gate) * up (5 kernels);
- bf16 geglu: the package's geglu_mlp;
- bf16 GEMMs alone: cuBLAS's merged gate/up GEMM and down GEMM, no activation;
- torch composed FP8: x and h quantized per row with torch ops around two rowwise-scaled
  torch._scaled_mm GEMMs (what a user composes from torch; torch's _scaled_mm refuses
  1x128 / 128x128 block scales);
- FP8 GEMMs alone: those two _scaled_mm GEMMs on operands quantized beforehand: the FP8
  ceiling of the run, with nobody quantizing h;
- ours FP8: geglu_mlp_fp8 on 128x128 block-scaled e4m3 weights (Transformers'
  FineGrainedFP8 layout), x and h quantized per 1x128 group inside.
Decode rows (1 and 16 tokens) are also timed replayed from CUDA graphs, against the FP8
weight-read floor: the FP8 weight bytes at the copy bandwidth measured in this run (a
1 GiB device-to-device copy). TFLOP/s counts the GEMM FLOPs (2 * tokens * dim * 3 *
hidden). Ours' error against the unquantized float64 MLP is reported per row (the
float64 checks against the quantized reference are tests/api/test_fp8_mlp.py's).
A table prints last; JSON goes to $OUT/fp8_mlp_bench.json (when OUT is set).
"""

import datetime
import json
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_mlp import bench_us, device_short, graph_us, load_kernel  # noqa: E402

E4M3 = torch.float8_e4m3fn
DT = torch.bfloat16
ROUNDS = 5
SHAPES = {  # name: (tokens, dim, hidden)
    "blog": (8192, 768, 3072),
    "gemma2b": (4096, 2048, 16384),
    "gemma7b": (4096, 3072, 24576),
    "gemma7b_32tok": (32, 3072, 24576),
    "gemma7b_16tok": (16, 3072, 24576),
    "gemma7b_1tok": (1, 3072, 24576),
    "gemma2b_16tok": (16, 2048, 16384),
    "gemma2b_1tok": (1, 2048, 16384),
}


def quantize_blocks(w):
    """bf16 [R, C] -> e4m3 with one float32 scale per 128x128 block (Transformers' rule)."""
    R, C = w.shape
    b = w.float().reshape(R // 128, 128, C // 128, 128)
    scale = b.abs().amax(dim=(1, 3)).clamp(min=1e-12) / 448.0
    return (b / scale[:, None, :, None]).clamp(-448, 448).to(E4M3).reshape(R, C), scale.contiguous()


def quantize_rowwise(v):
    """Per-row e4m3 and its float32 [rows, 1] scale, in torch ops."""
    amax = v.abs().amax(dim=-1, keepdim=True).float().clamp(min=1e-12)
    scale = amax / 448.0
    return (v.float() / scale).clamp(-448, 448).to(E4M3), scale


def interleaved(fns):
    samples = {k: [] for k in fns}
    for _ in range(ROUNDS):
        for k, fn in fns.items():
            samples[k].append(bench_us(fn))
    return {k: sorted(v)[len(v) // 2] for k, v in samples.items()}, samples


def copy_bandwidth():
    a = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    us = bench_us(lambda: b.copy_(a))
    return 2 * a.numel() / (us * 1e-6)  # bytes read + written per second


def main() -> int:
    geglu = load_kernel()
    torch.manual_seed(0)
    props = torch.cuda.get_device_properties(0)
    bw = copy_bandwidth()
    results = {
        "device": props.name,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "date": datetime.date.today().isoformat(),
        "copy_bandwidth_GBps": bw / 1e9,
        "rounds": ROUNDS,
        "rows": {},
    }
    print(f"{props.name}, torch {torch.__version__}, copy {bw / 1e9:.0f} GB/s", flush=True)
    for name, (M, d, H) in SHAPES.items():
        x = torch.randn(M, d, device="cuda", dtype=DT)
        wg = (torch.randn(H, d, device="cuda") * d**-0.5).to(DT)
        wu = (torch.randn(H, d, device="cuda") * d**-0.5).to(DT)
        wd = (torch.randn(d, H, device="cuda") * H**-0.5).to(DT)
        wgu = torch.cat([wg, wu])
        qg, sg = quantize_blocks(wg)
        qu, su = quantize_blocks(wu)
        qd, sd = quantize_blocks(wd)
        # torch composed: rowwise-scaled FP8 weights (per output channel).
        wgu_q, wgu_s = quantize_rowwise(wgu)
        wd_q, wd_s = quantize_rowwise(wd)
        xq0, xs0 = quantize_rowwise(x)
        hq0, hs0 = quantize_rowwise(torch.randn(M, H, device="cuda", dtype=DT))

        def eager():
            return F.linear(F.gelu(F.linear(x, wg), approximate="tanh") * F.linear(x, wu), wd)

        def ours_bf16():
            return geglu.geglu_mlp(x, wg, wu, wd)

        def bf16_gemms():
            torch.mm(x, wgu.T)
            return torch.mm(torch.empty(M, H, device="cuda", dtype=DT), wd.T)

        def composed_fp8():
            xq, xs = quantize_rowwise(x)
            gu = torch._scaled_mm(xq, wgu_q.T, scale_a=xs, scale_b=wgu_s.T, out_dtype=DT)
            h = F.gelu(gu[:, :H], approximate="tanh") * gu[:, H:]
            hq, hs = quantize_rowwise(h)
            return torch._scaled_mm(hq, wd_q.T, scale_a=hs, scale_b=wd_s.T, out_dtype=DT)

        def fp8_gemms():
            torch._scaled_mm(xq0, wgu_q.T, scale_a=xs0, scale_b=wgu_s.T, out_dtype=DT)
            return torch._scaled_mm(hq0, wd_q.T, scale_a=hs0, scale_b=wd_s.T, out_dtype=DT)

        def ours_fp8():
            return geglu.geglu_mlp_fp8(x, qg, sg, qu, su, qd, sd)

        fns = {"bf16 eager": eager, "bf16 geglu": ours_bf16, "bf16 GEMMs alone": bf16_gemms,
               "torch composed FP8": composed_fp8, "FP8 GEMMs alone": fp8_gemms, "ours FP8": ours_fp8}
        with torch.inference_mode():
            for fn in fns.values():
                fn()
            torch.cuda.synchronize()
            med, samples = interleaved(fns)
            row = {"tokens": M, "dim": d, "hidden": H, "us": med, "rounds_us": samples}
            flops = 2 * M * d * 3 * H
            row["ours_fp8_TFLOPs"] = flops / med["ours FP8"] / 1e6
            row["ours_fp8_vs_fp8_gemms"] = med["ours FP8"] / med["FP8 GEMMs alone"]
            row["ours_fp8_speedup_vs_bf16_geglu"] = med["bf16 geglu"] / med["ours FP8"]
            if M <= 64:
                fp8_bytes = 3 * d * H + (2 * H // 128 * d // 128 + d // 128 * H // 128) * 4
                row["fp8_floor_us"] = fp8_bytes / bw * 1e6
                row["graph_us"] = {k: graph_us(fns[k]) for k in ("bf16 geglu", "FP8 GEMMs alone", "ours FP8")}
                row["ours_fp8_graph_vs_floor"] = row["graph_us"]["ours FP8"] / row["fp8_floor_us"]
            y = ours_fp8().double()
        xd = x.double()
        exact = F.linear(F.gelu(F.linear(xd, wg.double()), approximate="tanh") * F.linear(xd, wu.double()), wd.double())
        row["rel_err_vs_unquantized"] = ((y - exact).norm() / exact.norm()).item()
        results["rows"][name] = row
        line = ", ".join(f"{k} {v:.1f}" for k, v in med.items())
        extra = f"; floor {row['fp8_floor_us']:.1f}, graph ours {row['graph_us']['ours FP8']:.1f}" if M <= 64 else ""
        print(f"{name} ({M}: {d} -> {H}) us: {line}; ours {row['ours_fp8_TFLOPs']:.0f} TFLOP/s, "
              f"{row['ours_fp8_vs_fp8_gemms']:.2f}x FP8 GEMMs alone, {row['ours_fp8_speedup_vs_bf16_geglu']:.2f}x "
              f"bf16 geglu{extra}; err vs unquantized {row['rel_err_vs_unquantized']:.3f}", flush=True)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "fp8_mlp_bench.json"), "w") as f:
            json.dump(results, f, indent=1)
    print("\n| MLP | bf16 eager | bf16 geglu | bf16 GEMMs alone | torch composed FP8 | FP8 GEMMs alone | ours FP8 | "
          f"ours / FP8 GEMMs | ours vs bf16 geglu | ({device_short(props.name)}) |")
    for name, row in results["rows"].items():
        u = row["us"]
        print(f"| {name} | " + " | ".join(f"{u[k]:.1f}" for k in ("bf16 eager", "bf16 geglu", "bf16 GEMMs alone",
                                                                 "torch composed FP8", "FP8 GEMMs alone", "ours FP8"))
              + f" | {row['ours_fp8_vs_fp8_gemms']:.2f}x | {row['ours_fp8_speedup_vs_bf16_geglu']:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
