"""Plain (eager) calls of the kernelized GemmaMLP layer at Gemma-2B widths, 64 and 16
tokens: the GPU's time per call in bursts of decode_mlp.py's BURST calls (its timed_burst) and the
host's time to issue and wait for them, on a fresh layer, after the call was captured
into a CUDA graph, and interleaved with eager's bursts and graph replays as
decode_mlp.py interleaves its rows; with the argument `cublas`, the same for cuBLAS's
GEMMs alone (decode_mlp.py's cublas row). A probe of why decode_mlp.py's plain geglu row at
64 tokens reads 7-9 us above its graph row (docs/DESIGN.md, "Decode GEMMs and what bounds a decode step").

    python tools/probe_plain_after_capture.py [geglu|cublas]
"""

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from decode_mlp import BURST, SIZES, graphed, rows_for, timed_burst  # noqa: E402


def host_and_gpu(call):
    """(host us per call to issue a burst and wait for it, GPU us per call)."""
    torch.cuda.synchronize()
    t = time.perf_counter()
    gpu = timed_burst(call)
    return round((time.perf_counter() - t) * 1e6 / BURST, 1), round(gpu, 1)


def main(name: str) -> None:
    with torch.inference_mode():
        for tokens in (64, 16):
            dim, hidden = SIZES["gemma-2b"]
            calls = rows_for(dim, hidden, tokens, None, False)
            fn, eager = calls[name], calls["eager"]
            for _ in range(5):
                fn()
                eager()
            print(tokens, name, "fresh: (host issue+wait us/call, gpu us/call)", [host_and_gpu(fn) for _ in range(3)])
            fn_graph = graphed(fn)
            print(tokens, name, "after capture:", [host_and_gpu(fn) for _ in range(3)])
            eager_graph = graphed(eager)
            out = []
            for _ in range(3):
                timed_burst(eager)
                timed_burst(eager_graph)
                out.append(host_and_gpu(fn))
                timed_burst(fn_graph)
            print(tokens, name, "interleaved as decode_mlp:", out)
            torch.cuda.synchronize()
            t, n = time.perf_counter(), 10
            for _ in range(n):
                fn()
            print(tokens, name, f"issue time of {n} calls, us/call:", round((time.perf_counter() - t) * 1e6 / n, 1))
            torch.cuda.synchronize()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "geglu")
