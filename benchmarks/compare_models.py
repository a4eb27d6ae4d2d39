"""Whole-model speed of a Gemma with geglu's layers, side by side with the alternatives.

Gemma-2B- and Gemma-7B-sized `GemmaForCausalLM`s at reduced depth (random weights,
bf16, one process), each run as:

  eager          Transformers as is
  geglu          kernelized with geglu's layers (example.py's recipe: GemmaMLP ->
                 GeGLUMLP, two fused GEMMs with the GeGLU in the epilogue)
  liger          kernelized with Liger's LigerGEGLUMLP (what Transformers' default
                 "GeGLUMLP" mapping points at), when liger-kernel is importable
  torch.compile  the eager model through torch.compile (dynamic shapes)
  geglu+compile  kernelized (Mode.INFERENCE | Mode.TORCH_COMPILE), then torch.compile
                 (opt in with --rows: compiling takes minutes)

Prefill: tokens/s of one forward over 4096 tokens (batch 1, logits for the last
token only, as generate() asks). Decode: tokens/s of one-token steps at batch 16 over
a 512-token KV cache. MLP share: the fraction of GPU kernel time spent inside the MLP
modules, from torch.profiler (record_function ranges around each MLP; not measurable
inside a compiled graph). Also records the kernelized model's logit error against
eager.

    python benchmarks/compare_models.py                     # GPU
    python benchmarks/compare_models.py --device cpu --tiny # smoke test of the script

Prints a table last; JSON to $OUT/models_bench.json (when OUT is set) and to
benchmarks/results/models_<device>.json.
"""

import argparse
import copy
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import example  # noqa: E402  (the kernelize recipe the README documents)

# Real Gemma sizes (Gemma 1: gelu_pytorch_tanh), depth reduced by --layers.
SIZES = {
    "gemma-2b": dict(
        hidden_size=2048, intermediate_size=16384, num_attention_heads=8, num_key_value_heads=1, head_dim=256
    ),
    "gemma-7b": dict(
        hidden_size=3072, intermediate_size=24576, num_attention_heads=16, num_key_value_heads=16, head_dim=256
    ),
}
TINY = dict(hidden_size=64, intermediate_size=256, num_attention_heads=4, num_key_value_heads=1, head_dim=16)
ROWS = ["eager", "geglu", "liger", "torch.compile", "geglu+compile"]
DEFAULT_ROWS = ["eager", "geglu", "liger", "torch.compile"]  # geglu+compile: opt in (compile time)


def log(msg: str) -> None:
    print(f"[models] {msg}", flush=True)


# --------------------------------------------------------------------------- models


def build_model(size: dict, layers: int, vocab: int, device: str, dtype: torch.dtype):
    from transformers import GemmaConfig, GemmaForCausalLM

    config = GemmaConfig(vocab_size=vocab, num_hidden_layers=layers, hidden_act="gelu_pytorch_tanh", **size)
    torch.manual_seed(0)
    with torch.device(device):  # random init on the device: fast
        model = GemmaForCausalLM(config)
    return model.to(dtype).eval()


def liger_layer():
    """Liger's LigerGEGLUMLP in the form kernels-community/liger-kernels ships it:
    a stateless layer running LigerGEGLUMLP.forward on the adopted GemmaMLP."""
    try:
        from liger_kernel.transformers import LigerGEGLUMLP
    except ImportError:
        from liger_kernel.transformers.geglu import LigerGEGLUMLP

    class LigerGEGLUMLPLayer(torch.nn.Module):
        has_backward = True
        can_torch_compile = True

        def forward(self, x):
            return LigerGEGLUMLP.forward(self, x)

    class InProcessRepository:  # kernels' RepositoryProtocol: load() -> layer class
        def load(self):
            return LigerGEGLUMLPLayer

        def __str__(self):
            return "liger_kernel.transformers.LigerGEGLUMLP (in process)"

    return InProcessRepository()


def make_row(row: str, base, device: str):
    """The model for one row, or raise (the row is then reported as skipped)."""
    from kernels import Mode, kernelize, use_kernel_mapping

    model = copy.deepcopy(base)
    if row == "eager":
        return model
    if row == "torch.compile":
        return torch.compile(model, dynamic=True)
    if row == "liger":
        with use_kernel_mapping({"GeGLUMLP": {device: liger_layer()}}, inherit_mapping=False):
            model = kernelize(model, mode=Mode.INFERENCE)
    elif row in ("geglu", "geglu+compile"):
        mode = Mode.INFERENCE | Mode.TORCH_COMPILE if "compile" in row else Mode.INFERENCE
        model = example.kernelize_with_geglu(model, mode=mode, layer=example.local_layer)
    else:
        raise ValueError(f"unknown row {row!r}")
    swapped = example.count_kernelized(model).get("GeGLUMLP", 0)
    if swapped != base.config.num_hidden_layers:  # kernelize fell back: not this row
        raise RuntimeError(f"only {swapped} of {base.config.num_hidden_layers} MLPs kernelized")
    return torch.compile(model, dynamic=True) if "compile" in row else model


# --------------------------------------------------------------------------- timing


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def timed(fn, device: str) -> float:
    """Seconds for fn(), measured with CUDA events on a GPU."""
    if device == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


@torch.no_grad()
def prefill_tokens_per_s(model, ids, device: str, warmup: int, iters: int) -> float:
    step = lambda: model(input_ids=ids, use_cache=False, logits_to_keep=1)  # noqa: E731
    for _ in range(warmup):
        step()
    sync(device)
    return ids.numel() / statistics.median(timed(step, device) for _ in range(iters))


def decoder(model, prompt):
    """Prefill `prompt` into a fresh KV cache; returns step(n), which decodes n greedy
    one-token steps for the whole batch."""
    from transformers import DynamicCache

    cache = DynamicCache()
    with torch.no_grad():
        out = model(input_ids=prompt, past_key_values=cache, use_cache=True, logits_to_keep=1)
    token = out.logits[:, -1:].argmax(-1)

    @torch.no_grad()
    def step(n: int) -> None:
        nonlocal token
        for _ in range(n):
            token = model(input_ids=token, past_key_values=cache, use_cache=True).logits[:, -1:].argmax(-1)

    return step


def decode_tokens_per_s(model, prompt, device: str, warmup: int, steps: int, reps: int) -> float:
    rates = []
    for _ in range(reps):
        step = decoder(model, prompt)
        step(warmup)
        sync(device)
        rates.append(prompt.shape[0] * steps / timed(lambda: step(steps), device))
    return statistics.median(rates)


# --------------------------------------------------------------------------- MLP share


MLP_RANGE = "geglu_bench::mlp"


def attach_mlp_ranges(model):
    """record_function ranges around every GemmaMLP call (kernelized or not)."""
    from transformers.models.gemma.modeling_gemma import GemmaMLP

    handles = []
    for module in model.modules():
        if isinstance(module, GemmaMLP):

            def enter(mod, args):
                mod._bench_range = torch.autograd.profiler.record_function(MLP_RANGE)
                mod._bench_range.__enter__()

            def leave(mod, args, out):
                mod._bench_range.__exit__(None, None, None)

            handles += [module.register_forward_pre_hook(enter), module.register_forward_hook(leave)]
    return handles


def kernel_time(event, device: str) -> float:
    if device == "cuda":
        return sum(k.duration for k in event.kernels)
    return event.self_cpu_time_total


def mlp_share(model, fn, device: str) -> float:
    """Fraction of device kernel time (CPU op time on CPU) spent inside MLP ranges."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    handles = attach_mlp_ranges(model)
    try:
        with torch.no_grad(), profile(activities=activities) as prof:
            fn()
            sync(device)
    finally:
        for h in handles:
            h.remove()
    events = prof.events()
    total = sum(kernel_time(e, device) for e in events)

    def subtree(e):
        return kernel_time(e, device) + sum(subtree(c) for c in e.cpu_children)

    mlp = sum(subtree(e) for e in events if e.name == MLP_RANGE)
    return mlp / total if total else float("nan")


# --------------------------------------------------------------------------- main


def device_short(device: str) -> str:
    if device != "cuda":
        return "cpu"
    name = torch.cuda.get_device_name().lower().replace("nvidia", "").split()
    return name[0] if name else "gpu"


def run_size(name, size, args, device, dtype) -> dict:
    base = build_model(size, args.layers, args.vocab, device, dtype)
    g = torch.Generator().manual_seed(1)
    prefill_ids = torch.randint(2, args.vocab, (1, args.prefill), generator=g).to(device)
    prompt = torch.randint(2, args.vocab, (args.batch, args.context), generator=g).to(device)
    with torch.no_grad():
        ref_logits = base(input_ids=prompt[:2], use_cache=False).logits.float()
    results = {}
    for row in args.rows:
        log(f"{name} / {row}")
        t0 = time.time()
        if t0 - args.start > args.time_budget:
            results[row] = {"skipped": f"time budget of {args.time_budget:.0f} s spent"}
            continue
        try:
            model = make_row(row, base, device)
            r = {}
            if row not in ("eager", "torch.compile"):
                r["kernelized"] = example.count_kernelized(getattr(model, "_orig_mod", model))
            with torch.no_grad():
                out = model(input_ids=prompt[:2], use_cache=False).logits.float()
            r["logits_rel_err_vs_eager"] = ((out - ref_logits).abs().max() / ref_logits.abs().max()).item()
            r["prefill_tokens_per_s"] = prefill_tokens_per_s(model, prefill_ids, device, args.warmup, args.iters)
            r["decode_tokens_per_s"] = decode_tokens_per_s(
                model, prompt, device, args.warmup, args.decode_steps, args.reps
            )
            if "compile" not in row:
                r["prefill_mlp_share"] = mlp_share(
                    model, lambda: model(input_ids=prefill_ids, use_cache=False, logits_to_keep=1), device
                )
                step = decoder(model, prompt)
                r["decode_mlp_share"] = mlp_share(model, lambda: step(4), device)
            r["seconds"] = round(time.time() - t0, 1)
            results[row] = r
            log(f"  {json.dumps(r)}")
            del model
        except Exception as e:  # a row that cannot run is reported, the rest go on
            results[row] = {"skipped": f"{type(e).__name__}: {e}"[:300]}
            log(f"  skipped: {results[row]['skipped']}")
            if args.verbose:
                traceback.print_exc()
        if device == "cuda":
            torch.cuda.empty_cache()
        torch._dynamo.reset()
    del base
    return results


def table(report: dict) -> str:
    lines = [
        f"{'model':<10} {'row':<14} {'prefill tok/s':>14} {'decode tok/s':>13} "
        f"{'MLP share (prefill/decode)':>27} {'vs eager':>17}"
    ]
    for name, rows in report["models"].items():
        eager = rows.get("eager", {})
        for row, r in rows.items():
            if "skipped" in r:
                lines.append(f"{name:<10} {row:<14} skipped: {r['skipped'][:70]}")
                continue
            share = (
                f"{r['prefill_mlp_share']:.0%} / {r['decode_mlp_share']:.0%}" if "prefill_mlp_share" in r else "-"
            )
            speed = "-"
            if "prefill_tokens_per_s" in eager:
                speed = (
                    f"{r['prefill_tokens_per_s'] / eager['prefill_tokens_per_s']:.2f}x / "
                    f"{r['decode_tokens_per_s'] / eager['decode_tokens_per_s']:.2f}x"
                )
            lines.append(
                f"{name:<10} {row:<14} {r['prefill_tokens_per_s']:>14,.0f} {r['decode_tokens_per_s']:>13,.0f} "
                f"{share:>27} {speed:>17}"
            )
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--sizes", default="gemma-2b,gemma-7b", help=f"comma list of {list(SIZES)}")
    ap.add_argument("--rows", default=",".join(DEFAULT_ROWS), help=f"comma list of {ROWS}")
    ap.add_argument("--layers", type=int, default=8, help="decoder layers (the real models have 18 / 28)")
    ap.add_argument("--vocab", type=int, default=256000)
    ap.add_argument("--prefill", type=int, default=4096, help="prefill tokens (batch 1)")
    ap.add_argument("--batch", type=int, default=16, help="decode batch")
    ap.add_argument("--context", type=int, default=512, help="KV cache length when decoding starts")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--decode-steps", type=int, default=16)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--tiny", action="store_true", help="tiny sizes and counts: a smoke test of this script")
    ap.add_argument(
        "--time-budget", type=float, default=420, help="seconds; rows not started by then are skipped"
    )
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    args.start = time.time()
    args.rows = args.rows.split(",")
    sizes = {n: SIZES[n] for n in args.sizes.split(",")}
    if args.tiny:
        sizes = {"tiny": TINY}
        args.vocab, args.prefill, args.batch, args.context = 128, 64, 4, 16
        args.warmup, args.iters, args.decode_steps, args.reps = 3, 2, 4, 1
    device = args.device
    dtype = torch.bfloat16 if device == "cuda" else torch.float32

    report = {
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "dtype": str(dtype).replace("torch.", ""),
        "config": {k: v for k, v in vars(args).items() if k not in ("verbose", "start")},
        "models": {},
    }
    try:
        import kernels
        import transformers

        report["kernels"], report["transformers"] = kernels.__version__, transformers.__version__
        import triton

        report["triton"] = triton.__version__
    except ImportError:
        pass
    for name, size in sizes.items():
        report["models"][name] = run_size(name, size, args, device, dtype)

    text = json.dumps(report, indent=2)
    results = REPO / "benchmarks" / "results"
    results.mkdir(parents=True, exist_ok=True)
    if not args.tiny:
        (results / f"models_{device_short(device)}.json").write_text(text + "\n")
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "models_bench.json").write_text(text + "\n")
    print()
    print(
        f"{report['device']}, {report['dtype']}, {args.layers} decoder layers, vocab {args.vocab}: "
        f"prefill {args.prefill} tokens (batch 1), decode batch {args.batch} at context {args.context}"
    )
    print(table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
