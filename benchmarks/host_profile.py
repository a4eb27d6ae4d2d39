"""Where the host time of a kernelized GemmaMLP call goes, by native frame: py-spy's
sampling profiler (`py-spy record --native`, from PyPI) over a loop of layer calls.

host_breakdown.py times calls and pieces from Python; this names the C++ below them
(torch's dispatcher, the stable ABI's shim, the allocator, the CUDA driver, the op's own
code). The loop syncs every BURST calls, as host_time.py does, so the GPU stays close
behind; samples inside the sync are dropped. The table gives, for each frame, the share
of the remaining samples whose stack holds it (inclusive), and the share where it is the
innermost frame (self).

    python benchmarks/host_profile.py --py-spy PATH/py-spy           # GPU, Gemma-2B, 16 tokens
    python benchmarks/host_profile.py --py-spy PATH --device cpu --tiny
"""

import argparse
import collections
import copy
import subprocess
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import example  # noqa: E402

BURST = 20
LOOP = "call_loop"  # the profiled function's name, found in each sample's stack
SYNC_FRAMES = ("synchronize", "cudaStreamSynchronize", "cudaDeviceSynchronize")


def call_loop(layer, x, seconds: float, sync) -> int:
    calls = 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        sync()
        for _ in range(BURST):
            layer(x)
        calls += BURST
    sync()
    return calls


def child(args) -> None:
    from transformers import GemmaConfig
    from transformers.models.gemma.modeling_gemma import GemmaMLP

    dim, hidden = (64, 256) if args.tiny else (2048, 16384)
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    with torch.device(args.device):
        eager = GemmaMLP(GemmaConfig(hidden_size=dim, intermediate_size=hidden, hidden_act="gelu_pytorch_tanh"))
        eager = eager.to(dtype).eval()
        x = torch.randn(1, args.tokens, dim, dtype=dtype)
    layer = example.kernelize_with_geglu(copy.deepcopy(eager), layer=example.local_layer)
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    with torch.inference_mode():
        call_loop(layer, x, 2.0, sync)  # warm up
        print("READY", flush=True)
        calls = call_loop(layer, x, args.seconds, sync)
    print(f"{calls} calls in {args.seconds} s", flush=True)


def frame_name(frame: str, width: int = 110) -> str:
    """'func (file:line)' -> 'func (file)'; native frames keep their library; C++
    template names cut to `width` characters."""
    if frame.endswith(")") and " (" in frame:
        func, where = frame[:-1].rsplit(" (", 1)
        if ":" in where and where.rsplit(":", 1)[1].isdigit():
            where = where.rsplit(":", 1)[0]
        if len(func) > width:
            func = func[: width - 3] + "..."
        return f"{func} ({Path(where).name})"
    return frame


def summarize(raw: Path, top: int) -> None:
    inclusive, own = collections.Counter(), collections.Counter()
    total = synced = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        idx = next((i for i, f in enumerate(frames) if f.startswith(LOOP + " ")), None)
        if idx is None:
            continue
        below = [frame_name(f) for f in frames[idx + 1:]]
        if any(s in f for f in below for s in SYNC_FRAMES):
            synced += int(count)
            continue
        total += int(count)
        for name in set(below):
            inclusive[name] += int(count)
        if below:
            own[below[-1]] += int(count)
    print(f"\n== py-spy --native: {total} samples inside the layer calls ({synced} in the sync dropped)")
    print(f"{'incl %':>7} {'self %':>7}  frame")
    for name, n in inclusive.most_common(top):
        print(f"{100 * n / total:7.1f} {100 * own[name] / total:7.1f}  {name}")
    print("\n== innermost frames")
    for name, n in own.most_common(top // 2):
        print(f"{100 * n / total:7.1f}  {name}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--py-spy", type=Path, help="the py-spy executable (omit inside the profiled child)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--rate", type=int, default=997)
    ap.add_argument("--top", type=int, default=70)
    ap.add_argument("--out", type=Path, default=Path("host_profile_raw.txt"))
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args)
        return 0
    if args.py_spy is None or not args.py_spy.exists():
        ap.error("--py-spy PATH: the py-spy executable (pip download py-spy; unzip its wheel)")
    cmd = [sys.executable, __file__, "--child", "--device", args.device, "--tokens", str(args.tokens),
           "--seconds", str(args.seconds)] + (["--tiny"] if args.tiny else [])
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    for line in proc.stdout:  # the imports and the warm-up are not sampled
        print(line, end="")
        if line.startswith("READY"):
            break
    spy = [str(args.py_spy), "record", "--native", "-r", str(args.rate), "-f", "raw",
           "-o", str(args.out), "--pid", str(proc.pid), "-d", str(int(args.seconds) - 1)]
    subprocess.run(spy, check=True)
    print(proc.stdout.read(), end="")
    if proc.wait() != 0:
        return 1
    summarize(args.out, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
