"""On a GPU: the product's two-dot Triton gate/up kernel against the one-dot kernel
(both B-tile builds) and cuBLAS's GEMM of the merged [2H, K] weight (no activation),
same inputs, bf16, each call warmed up first, then triton.testing.do_bench medians in
interleaved rounds. All three Triton kernels use the launch table's row for the shape,
forced to the tile form (the one-dot kernel has no TMA form yet), so the comparison is
of the main loop alone. Prints a table (us, TFLOP/s, ratios) and writes
one_dot_<gpu>.json to --out (default $OUT, else .):

    python tools/triton_one_dot/check_one_dot.py && python tools/triton_one_dot/bench.py --out "$OUT"
"""

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parent))
import one_dot_gemm  # noqa: E402
from check_one_dot import load_product, operands  # noqa: E402

SHAPES = {  # name: (M, K, H)
    "blog": (8192, 768, 3072),
    "gemma2b": (4096, 2048, 16384),
    "gemma7b": (4096, 3072, 24576),
    "decode-gemma7b": (16, 3072, 24576),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    tg = load_product(Path(a.build))
    one_dot_gemm.bind(tg)
    gpu = torch.cuda.get_device_name()
    print(f"{gpu}, torch {torch.__version__}, triton {triton.__version__}")
    rows = {}
    for name, (m, k, h) in SHAPES.items():
        x, wg, wu, _, _ = operands(m, k, h, torch.bfloat16, "none", "merged", seed=1)
        w = torch.cat([wg, wu])
        wg, wu = w[:h], w[h:]
        cfg = tg.select_config(x, wg, wu)._replace(kernel="tile", split_k=0)
        cfg = tg.select_config(x, wg, wu, cfg)
        fns = {
            "cublas_merged": lambda: torch.mm(x, w.t()),
            "two_dot": lambda: tg.geglu_forward(x, wg, wu, None, None, "tanh", config=cfg),
            "one_dot_view": lambda: one_dot_gemm.geglu_forward_one_dot(x, wg, wu, None, None, "tanh", "view", cfg),
            "one_dot_join": lambda: one_dot_gemm.geglu_forward_one_dot(x, wg, wu, None, None, "tanh", "join", cfg),
        }
        for fn in fns.values():  # compile and warm every kernel before any timing
            fn()
        torch.cuda.synchronize()
        times = {key: [] for key in fns}
        for _ in range(a.rounds):
            for key, fn in fns.items():
                times[key].append(triton.testing.do_bench(fn, warmup=25, rep=200))
        flops = 2 * m * k * 2 * h
        row = {key: statistics.median(t) * 1e3 for key, t in times.items()}  # us
        row["spread_us"] = {key: [min(t) * 1e3, max(t) * 1e3] for key, t in times.items()}
        row["config"] = cfg._asdict()
        rows[name] = row
        base = row["two_dot"]
        line = "  ".join(f"{key} {row[key]:8.1f} us {flops / row[key] / 1e6:6.1f} TF/s" for key in fns)
        print(f"{name:15s} M{m} K{k} H{h}: {line}")
        print(f"{'':15s} one-dot view {base / row['one_dot_view']:.3f}x, join {base / row['one_dot_join']:.3f}x "
              f"the two-dot kernel; cuBLAS merged / two-dot {row['cublas_merged'] / base:.3f}")  # fmt: skip
    os.makedirs(a.out, exist_ok=True)
    tag = gpu.replace(" ", "_")
    with open(os.path.join(a.out, f"one_dot_{tag}.json"), "w") as f:
        json.dump({"device": gpu, "torch": torch.__version__, "triton": triton.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
