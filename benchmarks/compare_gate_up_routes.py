"""Which gate/up route a CUDA GPU without the Hopper engine should run: the Triton fused
GEMM (GeGLU in its epilogue, triton_kernels/gemm.py) against cuBLAS writing [gate | up]
followed by the package's geglu kernel on the two halves (what the native MLP op runs
off sm_90). The Hopper engine's time is printed beside them where the GPU is an sm_90
one, as the reference the other two are not.

    python -m tools.build && python benchmarks/compare_gate_up_routes.py [--json PATH]

bf16, merged [2*hidden, dim] weight (gate rows first), microseconds: the median of
triton.testing.do_bench per round, the median of ROUNDS interleaved rounds; every route's
output is checked against a float32 reference first. Decode rows (16 and 1 tokens) are
timed replayed from a CUDA graph, as decoding loops run them.
"""

import argparse
import datetime
import json
import os
from pathlib import Path

import torch
import torch.nn.functional as F
from compare_mlp import bench_us, graphed  # benchmarks/, the script's directory

REPO = Path(__file__).resolve().parent.parent
SHAPES = {  # name: (tokens, dim, hidden)
    "blog": (8192, 768, 3072),
    "gemma2b": (4096, 2048, 16384),
    "gemma7b": (4096, 3072, 24576),
    "gemma7b_16": (16, 3072, 24576),
    "gemma7b_1": (1, 3072, 24576),
}
ROUNDS = 5


def load():
    os.environ.setdefault("LOCAL_KERNELS", f"org/geglu={REPO}")
    from kernels import get_kernel

    return get_kernel("org/geglu", version=1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--shapes", nargs="*", default=list(SHAPES))
    args = ap.parse_args()
    geglu = load()
    lin = geglu.linear
    tg = lin.triton_gemm
    dev = torch.device("cuda")
    sm90 = torch.cuda.get_device_capability() == (9, 0) and hasattr(lin.ops, "_geglu_linear")
    rows = []
    for name in args.shapes:
        m, k, hidden = SHAPES[name]
        gen = torch.Generator(device=dev).manual_seed(0)
        x = torch.randn(m, k, device=dev, dtype=torch.bfloat16, generator=gen)
        w = torch.randn(2 * hidden, k, device=dev, dtype=torch.bfloat16, generator=gen) / k**0.5
        wg, wu = w[:hidden], w[hidden:]
        ref = F.gelu(x.float() @ wg.float().t(), approximate="tanh") * (x.float() @ wu.float().t())
        routes = {
            "triton_fused": lambda: tg.geglu_forward(x, wg, wu, None, None, "tanh"),
            "cublas_then_geglu": lambda: geglu.geglu_merged(F.linear(x, w), "tanh"),
            "cublas_alone": lambda: F.linear(x, w),
        }
        if sm90:
            routes["sm90_engine"] = lambda: lin.ops._geglu_linear(x, wg, wu, None, None, "tanh")
        with torch.no_grad():
            for route, fn in routes.items():
                if route == "cublas_alone":
                    continue
                err = ((fn().float() - ref).abs().max() / ref.abs().max()).item()
                if err > 2e-2:
                    raise SystemExit(f"{name} {route}: relative error {err:.3g} against float32")
            timed = {r: (graphed(fn) if m <= 16 else fn) for r, fn in routes.items()}
            samples = {r: [] for r in timed}
            for _ in range(ROUNDS):
                for r, fn in timed.items():
                    samples[r].append(bench_us(fn))
        med = {r: sorted(v)[len(v) // 2] for r, v in samples.items()}
        rows.append({"shape": name, "tokens": m, "dim": k, "hidden": hidden, "us": med, "rounds": samples})
        ratio = med["cublas_then_geglu"] / med["triton_fused"]
        print(
            f"{name:12s} " + "  ".join(f"{r} {t:8.1f}" for r, t in med.items())
            + f"  cublas+geglu / triton {ratio:.2f}x",
            flush=True,
        )
    summary = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "date": datetime.date.today().isoformat(),
        "graph_replay_up_to_tokens": 16,
        "rows": rows,
    }
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
