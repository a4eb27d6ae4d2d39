"""Host time of each of 40 plain calls issued back to back (the GPU behind), for the
kernelized GemmaMLP layer and cuBLAS's GEMMs alone (decode_mlp.py's rows) at Gemma-2B
widths, 64 and 16 tokens, before and after each was captured into a CUDA graph: whether
the calls block on the GPU (a full launch queue would show as calls taking the GPU's
time per call). A probe beside probe_plain_after_capture.py.

    python tools/probe_plain_call_host.py
"""

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from decode_mlp import SIZES, graphed, rows_for  # noqa: E402


def per_call(fn, n: int = 40) -> str:
    """Each call's host us, after a sync, with no sync between the calls."""
    torch.cuda.synchronize()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e6)
    torch.cuda.synchronize()
    return " ".join(f"{t:.0f}" for t in times)


def main() -> None:
    with torch.inference_mode():
        for tokens in (64, 16):
            dim, hidden = SIZES["gemma-2b"]
            calls = rows_for(dim, hidden, tokens, None, False)
            layer, cublas = calls["geglu"], calls["cublas"]
            for _ in range(5):
                layer()
                cublas()
            print(tokens, "geglu fresh :", per_call(layer))
            print(tokens, "cublas fresh:", per_call(cublas))
            graphed(layer)
            graphed(cublas)
            print(tokens, "geglu after capture :", per_call(layer))
            print(tokens, "cublas after capture:", per_call(cublas))
            print(tokens, "geglu again :", per_call(layer))


if __name__ == "__main__":
    main()
