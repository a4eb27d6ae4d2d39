"""Decode (M <= 64 tokens) GEMMs: the decode kernels (geglu_kernels/cuda/geglu_decode.cu,
ops _geglu_decode_gate_up / _geglu_decode_linear) against the GEMM routes, as fractions
of the weight-read floor.

    python -m tools.build && python benchmarks/bench_decode.py [--rounds 2]

Per model size (Gemma-2B: dim 2048, hidden 16384; Gemma-7B: dim 3072, hidden 24576) and
token count M in (1, 16, 64), bf16, fresh non-zero random inputs:
- gate/up: ours (merged [2H, K] weight read in place) against one cuBLAS GEMM of the merged
  weight (F.linear, no activation), cuBLAS + the package's gelu_tanh_and_mul, and the
  Hopper GEMM engine `_geglu_linear_sm90` where the variant and GPU have it;
- down: ours (+ residual) against F.linear (no residual) and torch.addmm(residual, ...);
- the pair gate/up + down (+ residual) replayed from a CUDA graph: ours against cuBLAS
  merged GEMM + gelu_tanh_and_mul + addmm.
"% copy" is the weight bytes over the time, as a fraction of a 1 GiB device-to-device copy
(bytes read + written) timed in the same process. A crossover sweep (M = 1..64, model and
smaller shapes) gives the numbers behind geglu_decode::serves().

Times: median of triton.testing.do_bench (it flushes L2 between runs, as successive
layers do), microseconds. A table prints last; JSON goes to $OUT/decode_bench.json when
OUT is set.
"""

import argparse
import datetime
import json
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parent.parent
DT = torch.bfloat16
MODELS = {"gemma2b": (2048, 16384), "gemma7b": (3072, 24576)}
TOKENS = (1, 16, 64)
# Crossover sweep: (name, dim, hidden).
SWEEP = [("gemma2b", 2048, 16384), ("gemma7b", 3072, 24576), ("blog", 768, 3072), ("small", 512, 1024)]
SWEEP_TOKENS = (1, 8, 16, 32, 48, 64)


def bench_us(fn, rep=100) -> float:
    from triton.testing import do_bench

    return do_bench(fn, warmup=25, rep=rep, return_mode="median") * 1e3


def graph_us(fn) -> float:
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return bench_us(g.replay)


def load_kernel():
    from kernels import get_kernel

    os.environ["LOCAL_KERNELS"] = f"org/geglu={REPO}"
    return get_kernel("org/geglu", version=1)


def randn(*shape, scale=1.0):
    return (torch.randn(*shape, device="cuda", dtype=torch.float32) * scale).to(DT)


def rel_err(a, b) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def main() -> int:
    import triton

    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2, help="rounds of the model table (spread)")
    ap.add_argument("--no-sweep", action="store_true")
    args = ap.parse_args()

    geglu = load_kernel()
    ops = geglu._ops.ops
    props = torch.cuda.get_device_properties(0)
    has_sm90 = hasattr(ops, "_geglu_linear_sm90") and (props.major, props.minor) == (9, 0)
    res = {
        "device": props.name,
        "capability": f"{props.major}.{props.minor}",
        "sms": props.multi_processor_count,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "triton": triton.__version__,
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "dtype": "bfloat16",
        "rows": [],
        "sweep": [],
    }
    src = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    copy_bw = 2 * src.numel() / (bench_us(lambda: dst.copy_(src), rep=200) * 1e-6)
    del src, dst
    res["copy_bandwidth_tbps"] = copy_bw / 1e12
    print(f"{props.name} ({props.multi_processor_count} SMs), torch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"triton {triton.__version__}, {res['date']}; 1 GiB copy {copy_bw / 1e12:.3f} TB/s", flush=True)

    def frac(nbytes, us):
        return nbytes / (us * 1e-6) / copy_bw

    for rnd in range(args.rounds):
        for model, (dim, hidden) in MODELS.items():
            w = randn(2 * hidden, dim, scale=dim**-0.5)
            wg, wu = w[:hidden], w[hidden:]
            wd = randn(dim, hidden, scale=hidden**-0.5)
            gu_bytes, down_bytes = w.numel() * 2, wd.numel() * 2
            for m in TOKENS:
                x = randn(m, dim)
                resid = randn(m, dim)
                act = torch.empty(m, hidden, device="cuda", dtype=DT)
                h = ops._geglu_decode_gate_up(x, wg, wu, None, None, "tanh")
                y = ops._geglu_decode_linear(h, wd, None, resid)
                # Accuracy of this very shape against float64.
                g64 = x.double() @ w.double().t()
                h64 = F.gelu(g64[:, :hidden], approximate="tanh") * g64[:, hidden:]
                err_h = rel_err(h, h64)
                err_y = rel_err(y, h.double() @ wd.double().t() + resid.double())

                def cublas_act():
                    geglu.gelu_tanh_and_mul(act, F.linear(x, w))

                def ours_pair():
                    ops._geglu_decode_linear(ops._geglu_decode_gate_up(x, wg, wu, None, None, "tanh"), wd, None, resid)

                def cublas_pair():
                    geglu.gelu_tanh_and_mul(act, F.linear(x, w))
                    torch.addmm(resid, act, wd.t())

                t = {
                    "ours_gate_up": bench_us(lambda: ops._geglu_decode_gate_up(x, wg, wu, None, None, "tanh")),
                    "cublas_merged_gemm": bench_us(lambda: F.linear(x, w)),
                    "cublas_gemm_plus_act": bench_us(cublas_act),
                    "ours_down_residual": bench_us(lambda: ops._geglu_decode_linear(h, wd, None, resid)),
                    "ours_down": bench_us(lambda: ops._geglu_decode_linear(h, wd, None, None)),
                    "cublas_down": bench_us(lambda: F.linear(h, wd)),
                    "cublas_addmm_residual": bench_us(lambda: torch.addmm(resid, h, wd.t())),
                    "graph_ours_pair": graph_us(ours_pair),
                    "graph_cublas_pair": graph_us(cublas_pair),
                }
                if has_sm90:
                    t["sm90_engine_gate_up"] = bench_us(lambda: ops._geglu_linear_sm90(x, wg, wu, None, None, "tanh"))
                row = {
                    "round": rnd, "model": model, "m": m, "dim": dim, "hidden": hidden,
                    "gate_up_weight_bytes": gu_bytes, "down_weight_bytes": down_bytes,
                    "floor_gate_up_us": gu_bytes / copy_bw * 1e6, "floor_down_us": down_bytes / copy_bw * 1e6,
                    "rel_err_gate_up": err_h, "rel_err_down": err_y, "us": t,
                    "frac_copy": {
                        k: frac(gu_bytes if "gate_up" in k or "merged" in k or "act" in k else
                                down_bytes if "down" in k or "addmm" in k else gu_bytes + down_bytes, v)
                        for k, v in t.items()
                    },
                }
                res["rows"].append(row)
                f = row["frac_copy"]
                print(f"[r{rnd}] {model} M={m:2d}: gate/up ours {t['ours_gate_up']:7.1f} ({f['ours_gate_up']:.1%}) "
                      f"cuBLAS {t['cublas_merged_gemm']:7.1f} +act {t['cublas_gemm_plus_act']:7.1f}"
                      + (f" sm90 {t['sm90_engine_gate_up']:7.1f}" if has_sm90 else "")
                      + f" | down ours {t['ours_down_residual']:6.1f} ({f['ours_down_residual']:.1%}) "
                      f"cuBLAS {t['cublas_down']:6.1f} addmm {t['cublas_addmm_residual']:6.1f}"
                      f" | graph pair ours {t['graph_ours_pair']:7.1f} ({f['graph_ours_pair']:.1%}) "
                      f"cuBLAS {t['graph_cublas_pair']:7.1f} | err {err_h:.1e}/{err_y:.1e}", flush=True)
            del w, wg, wu, wd
            torch.cuda.empty_cache()

    if not args.no_sweep:
        for name, dim, hidden in SWEEP:
            w = randn(2 * hidden, dim, scale=dim**-0.5)
            wd = randn(dim, hidden, scale=hidden**-0.5)
            for m in SWEEP_TOKENS:
                x = randn(m, dim)
                h = randn(m, hidden)
                t = {
                    "ours_gate_up": bench_us(lambda: ops._geglu_decode_gate_up(x, w[:hidden], w[hidden:], None, None, "tanh"), rep=50),
                    "cublas_merged_gemm": bench_us(lambda: F.linear(x, w), rep=50),
                    "ours_down": bench_us(lambda: ops._geglu_decode_linear(h, wd, None, None), rep=50),
                    "cublas_down": bench_us(lambda: F.linear(h, wd), rep=50),
                }
                if has_sm90:
                    t["sm90_engine_gate_up"] = bench_us(lambda: ops._geglu_linear_sm90(x, w[:hidden], w[hidden:], None, None, "tanh"), rep=50)
                res["sweep"].append({"shape": name, "dim": dim, "hidden": hidden, "m": m, "us": t})
                print(f"sweep {name:8s} M={m:2d}: gate/up ours {t['ours_gate_up']:7.1f} cuBLAS {t['cublas_merged_gemm']:7.1f}"
                      + (f" sm90 {t['sm90_engine_gate_up']:7.1f}" if has_sm90 else "")
                      + f" | down ours {t['ours_down']:6.1f} cuBLAS {t['cublas_down']:6.1f}", flush=True)
            del w, wd

    # Summary table (last round).
    print(f"\nSummary (last round), us and % of the {copy_bw / 1e12:.2f} TB/s copy for the weight bytes:")
    print(f"{'case':22s} {'floor':>7s} {'ours':>7s} {'%copy':>6s} {'cuBLAS':>7s} {'%copy':>6s} {'sm90':>7s}")
    for row in (r for r in res["rows"] if r["round"] == args.rounds - 1):
        t, f = row["us"], row["frac_copy"]
        print(f"{row['model'] + ' gate/up M=' + str(row['m']):22s} {row['floor_gate_up_us']:7.1f} {t['ours_gate_up']:7.1f} "
              f"{f['ours_gate_up']:6.1%} {t['cublas_merged_gemm']:7.1f} {f['cublas_merged_gemm']:6.1%} "
              f"{t.get('sm90_engine_gate_up', float('nan')):7.1f}")
        print(f"{row['model'] + ' down+res M=' + str(row['m']):22s} {row['floor_down_us']:7.1f} {t['ours_down_residual']:7.1f} "
              f"{f['ours_down_residual']:6.1%} {t['cublas_addmm_residual']:7.1f} {f['cublas_addmm_residual']:6.1%}")
        print(f"{row['model'] + ' pair graph M=' + str(row['m']):22s} "
              f"{row['floor_gate_up_us'] + row['floor_down_us']:7.1f} {t['graph_ours_pair']:7.1f} "
              f"{f['graph_ours_pair']:6.1%} {t['graph_cublas_pair']:7.1f} {f['graph_cublas_pair']:6.1%}")
    out = os.environ.get("OUT")
    if out:
        Path(out, "decode_bench.json").write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
