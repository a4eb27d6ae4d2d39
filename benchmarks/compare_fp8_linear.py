"""FP8 linear benchmark: fp8_linear (one Transformers FP8Linear on geglu's FP8 engine)
at Gemma's attention projections, beside what a user runs instead, on one GPU, one
process, the same inputs for every variant.

    python -m tools.build && python benchmarks/compare_fp8_linear.py

Rows (tokens: in -> out), microseconds, do_bench medians after warm-up, the median of
ROUNDS interleaved rounds (every round in the JSON):
- bf16 F.linear: the unquantized projection (cuBLAS);
- FP8 GEMM alone: torch._scaled_mm on x and the weight quantized rowwise beforehand (per
  token, per output channel; torch's _scaled_mm refuses 1x128 / 128x128 block scales):
  the FP8 GEMM ceiling of the run, with nobody quantizing x;
- transformers FP8: Transformers' FP8Linear forward on the same block-scaled weight
  (kernels-community/finegrained-fp8; DeepGEMM where loadable), where that kernel loads
  (the Hub, or LOCAL_KERNELS): skipped with a note otherwise;
- ours: geglu.fp8_linear on the 128x128 block-scaled e4m3 weight, x quantized per 1x128
  group inside.
At 1 and 16 tokens the rows are also timed replayed from CUDA graphs, against the FP8
weight-read floor: the weight's and its scales' bytes at the copy bandwidth measured in
this run; a one-element kernel timed the same way gives the floor of any one launch. Ours' error against the float64 product of the unquantized operands is
reported per row (the float64 checks against the quantized reference are
tests/api/test_fp8_linear.py's). A table prints last; JSON to $OUT/fp8_linear_bench.json.
"""

import datetime
import json
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_fp8_mlp import copy_bandwidth, interleaved, quantize_blocks, quantize_rowwise  # noqa: E402
from compare_mlp import device_short, graph_us, load_kernel  # noqa: E402

DT = torch.bfloat16
PROJECTIONS = {  # name: (in, out) of Gemma's attention projections
    "7b q/k/v": (3072, 4096),
    "7b o": (4096, 3072),
    "2b q/o": (2048, 2048),
    "2b k/v": (2048, 256),
}
TOKENS = (1, 16, 2048, 4096)
DECODE_TOKENS = 16  # rows at or below: graph replays and the weight-read floor too


def transformers_fp8_linear(weight, scale):
    """Transformers' FP8Linear holding weight / scale, or (None, why) when its FP8 route
    cannot run here (its Hub kernel does not load)."""
    from transformers.integrations.finegrained_fp8 import FP8Linear

    n, k = weight.shape
    m = FP8Linear(k, n, block_size=(128, 128), activation_scheme="dynamic").cuda()
    m.weight = torch.nn.Parameter(weight, requires_grad=False)
    m.weight_scale_inv = torch.nn.Parameter(scale, requires_grad=False)
    try:
        with torch.inference_mode():
            m(torch.randn(1, k, device="cuda", dtype=DT))
    except Exception as e:  # ImportError / RuntimeError from the Hub kernel's loader
        return None, f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
    return m, None


def graphed_or_none(fn):
    """graph_us(fn), or None where fn cannot be captured (a kernel that syncs or tunes)."""
    try:
        return graph_us(fn)
    except Exception:  # a capture error: the eager row stands alone
        torch.cuda.synchronize()
        return None


def main() -> int:
    geglu = load_kernel()
    torch.manual_seed(0)
    props = torch.cuda.get_device_properties(0)
    bw = copy_bandwidth()
    import transformers

    results = {
        "device": props.name, "torch": torch.__version__, "cuda": torch.version.cuda,
        "transformers": transformers.__version__, "date": datetime.date.today().isoformat(),
        "copy_bandwidth_GBps": bw / 1e9, "rows": {}, "notes": [],
    }
    # What any one launch costs under the same timing (a one-element kernel): the bound
    # of the small-weight decode rows, whose weight reads take less.
    tiny = torch.zeros(1, device="cuda")
    results["one_kernel_us"] = interleaved({"one kernel": lambda: tiny.add_(1.0)})[0]["one kernel"]
    print(f"{props.name}, torch {torch.__version__}, copy {bw / 1e9:.0f} GB/s, "
          f"a one-element kernel {results['one_kernel_us']:.1f} us", flush=True)
    for proj, (k, n) in PROJECTIONS.items():
        w = (torch.randn(n, k, device="cuda") * k**-0.5).to(DT)
        qw, sw = quantize_blocks(w)
        qw_row, sw_row = quantize_rowwise(w)
        tf_linear, why = transformers_fp8_linear(qw, sw)
        if why and why not in results["notes"]:
            results["notes"].append(f"transformers FP8 skipped: {why}")
            print(f"transformers FP8 skipped: {why}", flush=True)
        for M in TOKENS:
            x = torch.randn(M, k, device="cuda", dtype=DT)
            xq, xs = quantize_rowwise(x)
            fns = {
                "bf16 F.linear": lambda: F.linear(x, w),
                "FP8 GEMM alone": lambda: torch._scaled_mm(xq, qw_row.T, scale_a=xs, scale_b=sw_row.T, out_dtype=DT),
                "ours": lambda: geglu.fp8_linear(x, qw, sw),
            }
            if tf_linear is not None:
                fns["transformers FP8"] = lambda: tf_linear(x)
            with torch.inference_mode():
                for fn in fns.values():
                    fn()
                torch.cuda.synchronize()
                med, samples = interleaved(fns)
                row = {"tokens": M, "in": k, "out": n, "us": med, "rounds_us": samples}
                row["TFLOPs"] = {name: 2 * M * k * n / us / 1e6 for name, us in med.items()}
                row["ours_vs_fp8_gemm"] = med["ours"] / med["FP8 GEMM alone"]
                row["ours_speedup_vs_bf16"] = med["bf16 F.linear"] / med["ours"]
                if M <= DECODE_TOKENS:
                    fp8_bytes = n * k + (n // 128) * (k // 128) * 4
                    row["fp8_floor_us"] = fp8_bytes / bw * 1e6
                    row["graph_us"] = {name: graphed_or_none(fn) for name, fn in fns.items()}
                    row["ours_vs_floor"] = med["ours"] / row["fp8_floor_us"]
                    row["ours_graph_vs_floor"] = row["graph_us"]["ours"] / row["fp8_floor_us"]
                y = geglu.fp8_linear(x, qw, sw).double()
            exact = x.double() @ w.double().T
            row["rel_err_vs_unquantized"] = ((y - exact).norm() / exact.norm()).item()
            name = f"{proj} x{M}"
            results["rows"][name] = row
            line = ", ".join(f"{key} {us:.1f}" for key, us in med.items())
            extra = (f"; floor {row['fp8_floor_us']:.1f}, graph ours {row['graph_us']['ours']:.1f}"
                     if M <= DECODE_TOKENS else "")
            print(f"{name} ({k} -> {n}) us: {line}; ours {row['ours_vs_fp8_gemm']:.2f}x FP8 GEMM alone, "
                  f"{row['ours_speedup_vs_bf16']:.2f}x bf16{extra}; err vs unquantized "
                  f"{row['rel_err_vs_unquantized']:.4f}", flush=True)
    out = os.environ.get("OUT")
    if out:
        Path(out, "fp8_linear_bench.json").write_text(json.dumps(results, indent=1))
    cols = ["bf16 F.linear", "FP8 GEMM alone", "transformers FP8", "ours"]
    print(f"\n| projection x tokens | {' | '.join(cols)} | ours / FP8 GEMM | ours / floor (graph) "
          f"| ({device_short(props.name)}, us) |")
    for name, row in results["rows"].items():
        u = row["us"]
        cells = [f"{u[c]:.1f}" if c in u else "-" for c in cols]
        floor = (f"{row['ours_vs_floor']:.2f}x ({row['ours_graph_vs_floor']:.2f}x)" if "fp8_floor_us" in row else "")
        print(f"| {name} | " + " | ".join(cells) + f" | {row['ours_vs_fp8_gemm']:.2f}x | {floor} |")
    for note in results["notes"]:
        print(note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
