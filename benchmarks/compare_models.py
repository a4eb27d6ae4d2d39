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

Modes (--mode, comma list; default prefill, decode, generate):

  prefill   tokens/s of one forward over 4096 tokens (batch 1, logits for the last
            token only, as generate() asks), plus the MLP share of GPU kernel time
  decode    tokens/s of one-token steps at batch 16 over a 512-token KV cache
  train     tokens/s of one training step (forward, causal-LM loss, backward for
            every parameter; batch 1, --train-tokens tokens), the rows kernelized
            with Mode.TRAINING (geglu's layers then take their autograd route;
            geglu+compile: Mode.TRAINING | Mode.TORCH_COMPILE), every row built and
            warmed up first, then timed in --rounds interleaved rounds of --iters
            steps (median and min-max over the rounds, ratios to eager and to
            torch.compile taken within each round)
  generate  tokens/s of `model.generate()` as users call it: greedy, a 128-token
            prompt, exactly 64 new tokens (min_new_tokens = max_new_tokens: no row
            stops early), at batch 1 and 8, with
              dynamic  the default DynamicCache, no compilation (the torch.compile row
                       compiles the model's forward, dynamic shapes)
              static   cache_implementation="static": generate() compiles the decode
                       step itself (Transformers' CompileConfig defaults: inductor,
                       mode "reduce-overhead", i.e. CUDA graphs) for every row, so the
                       torch.compile row would repeat the eager one and is skipped
            Rows run in --rounds interleaved rounds (each round times every row once,
            in a rotated order); reported: median and min-max over the rounds, and
            the ratio to eager taken within each round (median, min-max). Compilation
            and CUDA-graph recording happen in untimed warm-up calls; graph breaks,
            cudagraph skips and recompiles seen in the timed rounds are recorded.

MLP share: the fraction of GPU kernel time spent inside the MLP modules, from
torch.profiler (record_function ranges around each MLP; not measurable inside a
compiled graph). Also records the kernelized model's logit error against eager.
Timing of every phase goes to stderr ("[models] phase ..."); --time-budget skips
what has not started by then (reported as skipped).

    python benchmarks/compare_models.py                          # GPU, all modes
    python benchmarks/compare_models.py --mode generate --rounds 5
    python benchmarks/compare_models.py --mode train --rows eager,torch.compile,geglu+compile --rounds 5
    python benchmarks/compare_models.py --device cpu --tiny      # smoke test of the script

Prints a table last; JSON (device, versions, date) to $OUT/models_bench[_TAG].json (when
OUT is set) and to benchmarks/results/models_<device>[_TAG].json (--tag TAG).
"""

import argparse
import contextlib
import copy
import datetime
import gc
import json
import os
import platform
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
MODES = ["prefill", "decode", "generate", "train"]
DEFAULT_MODES = ["prefill", "decode", "generate"]
GEN_CACHES = ["dynamic", "static"]
# With the static cache generate() compiles every row's decode step itself: a row that
# is torch.compile'd already would only repeat another row.
STATIC_SKIP = {
    "torch.compile": "generate() compiles every row with the static cache: this row would repeat eager",
    "geglu+compile": "generate() compiles every row with the static cache: this row would repeat geglu",
}


def log(msg: str) -> None:
    print(f"[models] {msg}", flush=True)


# --------------------------------------------------------------------------- run clock


def elapsed(args) -> float:
    return time.time() - args.start


def over_budget(args) -> bool:
    return elapsed(args) > args.time_budget


@contextlib.contextmanager
def phase(args, name: str):
    """Wall time of one phase, to stderr (the lead's knob for --rounds / --gen-tokens)."""
    t0 = time.time()
    try:
        yield
    finally:
        print(
            f"[models] phase {name}: {time.time() - t0:.1f} s (run total {elapsed(args):.0f} s)",
            file=sys.stderr,
            flush=True,
        )


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


def make_row(row: str, base, device: str, backend: str = "inductor", for_generate: bool = False,
             training: bool = False):
    """The model for one row, or raise (the row is then reported as skipped).

    for_generate: the form generate() needs. torch.compile wraps the model's `forward`
    (generate() calls the module itself, which an OptimizedModule wrapper would bypass),
    and the kernelized rows are kernelized with Mode.TORCH_COMPILE as well, because
    generate() compiles them with the static cache.
    training: kernelized with Mode.TRAINING, in train() mode."""
    from kernels import Mode, kernelize, use_kernel_mapping

    model = copy.deepcopy(base)
    if training:
        model.train()
    if row == "eager":
        return model
    base_mode = Mode.TRAINING if training else Mode.INFERENCE
    compile_mode = base_mode | Mode.TORCH_COMPILE
    if row == "torch.compile":
        return compile_model(model, backend, for_generate)
    if row == "liger":
        with use_kernel_mapping({"GeGLUMLP": {device: liger_layer()}}, inherit_mapping=False):
            model = kernelize(model, mode=compile_mode if for_generate else base_mode)
    elif row in ("geglu", "geglu+compile"):
        mode = compile_mode if ("compile" in row or for_generate) else base_mode
        model = example.kernelize_with_geglu(model, mode=mode, layer=example.local_layer)
    else:
        raise ValueError(f"unknown row {row!r}")
    swapped = example.count_kernelized(model).get("GeGLUMLP", 0)
    if swapped != base.config.num_hidden_layers:  # kernelize fell back: not this row
        raise RuntimeError(f"only {swapped} of {base.config.num_hidden_layers} MLPs kernelized")
    return compile_model(model, backend, for_generate) if "compile" in row else model


def compile_model(model, backend: str, for_generate: bool):
    if for_generate:  # the way Transformers' docs compile a model for generate()
        model.forward = torch.compile(model.forward, dynamic=True, backend=backend)
        return model
    return torch.compile(model, dynamic=True, backend=backend)


def unwrap(model):
    return getattr(model, "_orig_mod", model)


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


def train_step(model, ids):
    """One training step: forward, the causal-LM loss, backward into fresh gradients."""
    params = [p for p in model.parameters() if p.requires_grad]

    def step():
        loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
        for p in params:
            p.grad = None
        return loss

    return step


def allocator_counts(device: str) -> dict:
    """The caching allocator's cudaMalloc / cudaFree calls and retries so far: in steady
    state a step should need none (a cudaFree synchronizes the device)."""
    if device != "cuda":
        return {}
    st = torch.cuda.memory_stats()
    return {k: st.get(k, 0) for k in ("num_device_alloc", "num_device_free", "num_alloc_retries")}


def train_rates(model, ids, device: str, warmup: int, iters: int) -> dict:
    """Training-step tokens/s (median of iters after warmup), every step's time, and
    the allocator calls the timed steps made."""
    step = train_step(model, ids)
    for _ in range(warmup):
        step()
    sync(device)
    before = allocator_counts(device)
    times = [timed(step, device) for _ in range(iters)]
    return {
        "train_tokens_per_s": ids.numel() / statistics.median(times),
        "train_step_ms": [round(t * 1e3, 2) for t in times],
        "train_allocator_calls_in_timed_steps": {k: v - before[k] for k, v in allocator_counts(device).items()},
    }


def loss_and_mlp_grad(model, ids):
    """One forward and backward: the loss and the first MLP's down-projection gradient,
    what every training row is checked by against eager."""
    loss = model(input_ids=ids, labels=ids, use_cache=False).loss
    loss.backward()
    return loss.item(), unwrap(model).model.layers[0].mlp.down_proj.weight.grad.float()


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


# --------------------------------------------------------------------------- prefill / decode


def run_steps(name, base, args, device) -> dict:
    """The prefill and decode-step rows (one row after the other)."""
    g = torch.Generator().manual_seed(1)
    prefill_ids = torch.randint(2, args.vocab, (1, args.prefill), generator=g).to(device)
    prompt = torch.randint(2, args.vocab, (args.batch, args.context), generator=g).to(device)
    with torch.no_grad():
        ref_logits = base(input_ids=prompt[:2], use_cache=False).logits.float()
    results = {}
    for row in args.rows:
        log(f"{name} / {row}")
        t0 = time.time()
        if over_budget(args):
            results[row] = {"skipped": f"time budget of {args.time_budget:.0f} s spent"}
            continue
        try:
            with phase(args, f"{name} {'+'.join(args.step_modes)} {row}"):
                model = make_row(row, base, device, args.compile_backend)
                r = {}
                if row not in ("eager", "torch.compile"):
                    r["kernelized"] = example.count_kernelized(unwrap(model))
                with torch.no_grad():
                    out = model(input_ids=prompt[:2], use_cache=False).logits.float()
                r["logits_rel_err_vs_eager"] = ((out - ref_logits).abs().max() / ref_logits.abs().max()).item()
                if "prefill" in args.step_modes:
                    r["prefill_tokens_per_s"] = prefill_tokens_per_s(
                        model, prefill_ids, device, args.warmup, args.iters
                    )
                if "decode" in args.step_modes:
                    r["decode_tokens_per_s"] = decode_tokens_per_s(
                        model, prompt, device, args.warmup, args.decode_steps, args.reps
                    )
                if "compile" not in row:
                    if "prefill" in args.step_modes:
                        r["prefill_mlp_share"] = mlp_share(
                            model, lambda: model(input_ids=prefill_ids, use_cache=False, logits_to_keep=1), device
                        )
                    if "decode" in args.step_modes:
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
    return results


# --------------------------------------------------------------------------- training step


def run_train(name, base, args, device) -> dict:
    """Training-step rows in interleaved rounds. Every row's model is built first (kernelized
    with Mode.TRAINING; a compiled row compiles in its first step), checked against eager's
    loss and first down-projection gradient, and warmed up; then each of --rounds rounds
    times --iters steps of every row, in an order rotated each round. Per row: tokens/s
    (each round's median step; median and min-max over the rounds), the ratio to eager and
    to the torch.compile row within each round, every step's time, the allocator's device
    calls in the timed steps, graph breaks and recompiles in warm-up and in the rounds."""
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(2, args.vocab, (1, args.train_tokens), generator=g).to(device)
    check_ids = ids[:, :256]
    ref_model = make_row("eager", base, device, training=True)  # every row's check
    ref_loss, ref_grad = loss_and_mlp_grad(ref_model, check_ids)
    del ref_model
    results, steps = {}, {}
    for row in args.rows:
        if over_budget(args):
            results[row] = {"train_skipped": f"time budget of {args.time_budget:.0f} s spent"}
            log(f"{name} train / {row}: {results[row]['train_skipped']}")
            continue
        before = compile_counts()
        t0 = time.time()
        try:
            with phase(args, f"{name} train: build, check, warm up {row}"):
                model = make_row(row, base, device, args.compile_backend, training=True)
                r = {}
                if row not in ("eager", "torch.compile"):
                    r["kernelized"] = example.count_kernelized(unwrap(model))
                loss, grad = loss_and_mlp_grad(model, check_ids)
                r["train_loss_rel_err_vs_eager"] = abs(loss - ref_loss) / abs(ref_loss)
                r["train_grad_rel_err_vs_eager"] = ((grad - ref_grad).norm() / ref_grad.norm()).item()
                del grad
                step = train_step(model, ids)
                for _ in range(args.warmup):
                    step()
                sync(device)
        except Exception as e:  # a row that cannot run is reported, the rest go on
            results[row] = {"train_skipped": f"{type(e).__name__}: {e}"[:300]}
            log(f"{name} train / {row}: skipped: {results[row]['train_skipped']}")
            if args.verbose:
                traceback.print_exc()
            continue
        r["warmup_seconds"] = round(time.time() - t0, 1)
        r["warmup"] = counts_since(before)
        results[row], steps[row] = r, step

    active = list(steps)
    rates = {row: [] for row in active}
    times = {row: [] for row in active}
    alloc = {row: {} for row in active}
    in_rounds = {row: None for row in active}
    with phase(args, f"{name} train: {args.rounds} rounds x {len(active)} rows"):
        for rnd in range(args.rounds if active else 0):
            if rnd > 0 and over_budget(args):
                log(f"{name} train: time budget spent after {rnd} rounds")
                break
            for row in active[rnd % len(active) :] + active[: rnd % len(active)]:
                before, before_alloc = compile_counts(), allocator_counts(device)
                t = [timed(steps[row], device) for _ in range(args.iters)]
                times[row] += t
                rates[row].append(ids.numel() / statistics.median(t))
                for k, v in allocator_counts(device).items():
                    alloc[row][k] = alloc[row].get(k, 0) + v - before_alloc[k]
                delta = counts_since(before)
                if in_rounds[row] is None:
                    in_rounds[row] = delta
                else:
                    for k in ("graph_breaks", "cudagraph_skips", "graphs_compiled"):
                        in_rounds[row][k] += delta[k]
    for row in active:
        r = results[row]
        if not rates[row]:
            continue
        r["train_tokens_per_s"] = statistics.median(rates[row])
        r["train_rounds_tokens_per_s"] = spread(rates[row])
        for anchor in ("eager", "torch.compile"):
            if row != anchor and rates.get(anchor):
                r[f"train_vs_{anchor}"] = spread(a / b for a, b in zip(rates[row], rates[anchor]))
        r["train_step_ms"] = [round(t * 1e3, 2) for t in times[row]]
        r["train_allocator_calls_in_timed_steps"] = alloc[row]
        r["train_in_timed_rounds"] = in_rounds[row]
        log(f"{name} train / {row}: {json.dumps({k: v for k, v in r.items() if k != 'train_step_ms'})}")
    return results


# --------------------------------------------------------------------------- generate()


def compile_counts() -> dict:
    """torch._dynamo's global counters that tell whether compiled generation stayed
    compiled: graph breaks, inductor's cudagraph skips, graphs compiled."""
    from torch._dynamo.utils import counters

    return {
        "graph_breaks": sum(counters["graph_break"].values()),
        "cudagraph_skips": counters["inductor"]["cudagraph_skips"],
        "graphs_compiled": counters["stats"]["unique_graphs"],
        "break_reasons": set(counters["graph_break"]),
    }


def counts_since(before: dict) -> dict:
    now = compile_counts()
    out = {k: now[k] - before[k] for k in ("graph_breaks", "cudagraph_skips", "graphs_compiled")}
    new = sorted(now["break_reasons"] - before["break_reasons"])
    if new:
        out["graph_break_reasons"] = [m[:200] for m in new[:5]]
    return out


def raise_recompile_limit(limit: int = 64) -> None:
    """generate() compiles the same code (Module.__call__) for every row and batch size;
    past torch._dynamo's recompile limit (8) it would silently run eager."""
    cfg = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(cfg, name):
            setattr(cfg, name, max(getattr(cfg, name), limit))
            return


def generate_kwargs(model, args, cache: str, device: str) -> dict:
    n = args.gen_tokens
    pad = model.generation_config.pad_token_id
    pad = 0 if pad is None else pad
    kw = dict(max_new_tokens=n, min_new_tokens=n, do_sample=False, use_cache=True, pad_token_id=pad)
    if cache == "static":
        kw["cache_implementation"] = "static"
        if device != "cuda":  # generate() compiles on accelerators only unless asked to
            from transformers import CompileConfig

            config = CompileConfig(backend=args.compile_backend, mode="default")
            config._compile_all_devices = True
            kw["compile_config"] = config
    return kw


@torch.no_grad()
def generate_once(model, prompt, kw: dict, device: str):
    """(seconds, new tokens) of one model.generate() call, wall clock."""
    sync(device)
    t = time.perf_counter()
    out = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), **kw)
    sync(device)
    seconds = time.perf_counter() - t
    seq = out if isinstance(out, torch.Tensor) else out.sequences
    new = seq[:, prompt.shape[1] :]
    if new.shape[1] != kw["max_new_tokens"]:
        raise RuntimeError(f"generated {new.shape[1]} tokens, not {kw['max_new_tokens']}")
    return seconds, new


def spread(values) -> dict:
    values = list(values)
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "rounds": [round(v, 4) for v in values],
    }


def run_generate(name, base, args, device) -> dict:
    """generate() tokens/s per cache kind and batch size, rows interleaved in rounds."""
    raise_recompile_limit()
    g = torch.Generator().manual_seed(2)
    prompts = {b: torch.randint(2, args.vocab, (b, args.gen_prompt), generator=g).to(device) for b in args.gen_batches}
    models, built = {}, {}
    with phase(args, f"{name} generate: build rows"):
        for row in args.rows:
            try:
                # Copies of base even for eager: generate() leaves its compiled call on the model.
                models[row] = make_row(row, base, device, args.compile_backend, for_generate=True)
                built[row] = None
            except Exception as e:
                built[row] = f"{type(e).__name__}: {e}"[:300]
                log(f"{name} / {row}: skipped: {built[row]}")
                if args.verbose:
                    traceback.print_exc()

    report = {}
    for cache in args.gen_caches:
        if cache == "static" and device != "cuda" and not args.cpu_static:
            reason = "static cache + compile on CPU is slow: skipped (--cpu-static runs it)"
            report[cache] = {"skipped": reason}
            log(f"{name} generate/{cache}: {reason}")
            continue
        report[cache] = {}
        for batch in args.gen_batches:
            report[cache][f"batch{batch}"] = measure_generate(
                name, models, built, prompts[batch], args, device, cache
            )
    del models
    return report


def measure_generate(name, models, built, prompt, args, device, cache) -> dict:
    batch = prompt.shape[0]
    where = f"{name} generate/{cache} batch {batch}"
    results, active = {}, []
    for row in args.rows:
        if built[row] is not None:
            results[row] = {"skipped": built[row]}
            continue
        if cache == "static" and row in STATIC_SKIP:
            results[row] = {"skipped": STATIC_SKIP[row]}
            continue
        if over_budget(args):
            results[row] = {"skipped": f"time budget of {args.time_budget:.0f} s spent"}
            log(f"{where} / {row}: {results[row]['skipped']}")
            continue
        model = models[row]
        kw = generate_kwargs(unwrap(model), args, cache, device)
        before = compile_counts()
        try:
            # Untimed: compilation, CUDA-graph recording (the static cache's second call
            # may record again for a new cache allocation).
            with phase(args, f"{where} warm-up {row}"):
                warm = [generate_once(model, prompt, kw, device)[0] for _ in range(2 if cache == "static" else 1)]
        except Exception as e:
            results[row] = {"skipped": f"{type(e).__name__}: {e}"[:300]}
            log(f"{where} / {row}: skipped: {results[row]['skipped']}")
            if args.verbose:
                traceback.print_exc()
            continue
        r = {"warmup_seconds": [round(w, 2) for w in warm], "warmup": counts_since(before)}
        if cache == "static":
            r["compiled_by_generate"] = hasattr(unwrap(model), "_compiled_call")
            config = getattr(unwrap(model), "_last_compile_config", None)
            if config is not None and hasattr(config, "to_dict"):
                r["compile_config"] = {k: str(v) for k, v in config.to_dict().items()}
        if row not in ("eager", "torch.compile"):
            r["kernelized"] = example.count_kernelized(unwrap(model))
        results[row] = r
        active.append(row)

    rates = {row: [] for row in active}
    tokens, in_rounds = {}, {row: None for row in active}
    with phase(args, f"{where} {args.rounds} rounds x {len(active)} rows"):
        for rnd in range(args.rounds if active else 0):
            if rnd > 0 and over_budget(args):
                log(f"{where}: time budget spent after {rnd} rounds")
                break
            order = active[rnd % len(active) :] + active[: rnd % len(active)]  # rotated each round
            for row in order:
                if "error" in results[row]:
                    continue
                kw = generate_kwargs(unwrap(models[row]), args, cache, device)
                before = compile_counts()
                try:
                    seconds, new = generate_once(models[row], prompt, kw, device)
                except Exception as e:
                    results[row]["error"] = f"round {rnd}: {type(e).__name__}: {e}"[:300]
                    log(f"{where} / {row}: {results[row]['error']}")
                    continue
                rates[row].append(batch * args.gen_tokens / seconds)
                tokens[row] = new
                delta = counts_since(before)
                if in_rounds[row] is None:
                    in_rounds[row] = delta
                else:
                    for k in ("graph_breaks", "cudagraph_skips", "graphs_compiled"):
                        in_rounds[row][k] += delta[k]

    eager = rates.get("eager", [])
    for row in active:
        r = results[row]
        if not rates[row]:
            continue
        r["tokens_per_s"] = spread(rates[row])
        r["in_timed_rounds"] = in_rounds[row]
        ratios = [a / b for a, b in zip(rates[row], eager)]
        if ratios and row != "eager":
            r["vs_eager"] = spread(ratios)  # each round's ratio: same host state
        if row != "eager" and "eager" in tokens:
            r["same_tokens_as_eager"] = (tokens[row] == tokens["eager"]).float().mean().item()
        log(f"{where} / {row}: {json.dumps({k: v for k, v in r.items() if k != 'compile_config'})}")
    return results


# --------------------------------------------------------------------------- report


def device_short(device: str) -> str:
    if device != "cuda":
        return "cpu"
    name = torch.cuda.get_device_name().lower().replace("nvidia", "").split()
    return name[0] if name else "gpu"


def steps_table(report: dict) -> str:
    lines = [
        f"{'model':<10} {'row':<14} {'prefill tok/s':>14} {'decode tok/s':>13} "
        f"{'MLP share (prefill/decode)':>27} {'vs eager (prefill/decode)':>26}"
    ]

    def num(r, key):
        return f"{r[key]:,.0f}" if key in r else "-"

    def pct(r, key):
        return f"{r[key]:.0%}" if key in r else "-"

    def ratio(r, eager, key):
        return f"{r[key] / eager[key]:.2f}x" if key in r and eager.get(key) else "-"

    for name, rows in report["models"].items():
        eager = rows.get("eager", {})
        for row, r in rows.items():
            if "skipped" in r:
                lines.append(f"{name:<10} {row:<14} skipped: {r['skipped'][:70]}")
                continue
            share = f"{pct(r, 'prefill_mlp_share')} / {pct(r, 'decode_mlp_share')}"
            keys = ("prefill_tokens_per_s", "decode_tokens_per_s")
            speed = " / ".join(ratio(r, eager, k) for k in keys)
            lines.append(
                f"{name:<10} {row:<14} {num(r, keys[0]):>14} {num(r, keys[1]):>13} {share:>27} {speed:>26}"
            )
    return "\n".join(lines)


def train_table(report: dict) -> str:
    lines = [
        f"{'model':<10} {'row':<14} {'tok/s median':>13} {'(min - max)':>21} {'vs eager':>22} "
        f"{'vs torch.compile':>22} {'grad err':>9}"
    ]

    def ratio(r, key):
        v = r.get(key)
        return f"{v['median']:.3f}x ({v['min']:.3f}-{v['max']:.3f})" if v else "-"

    for name, rows in report["models"].items():
        for row, r in rows.items():
            if "train_rounds_tokens_per_s" not in r:
                why = r.get("train_skipped", "no timed round")
                lines.append(f"{name:<10} {row:<14} skipped: {why[:70]}")
                continue
            t = r["train_rounds_tokens_per_s"]
            warn = ""
            for key in ("warmup", "train_in_timed_rounds"):
                counts = r.get(key) or {}
                if counts.get("graph_breaks"):
                    warn += f"  ! {counts['graph_breaks']} graph breaks ({key})"
                if key == "train_in_timed_rounds" and counts.get("graphs_compiled"):
                    warn += "  ! compiled in timed rounds"
            t_range = f"({t['min']:,.0f} - {t['max']:,.0f})"
            lines.append(
                f"{name:<10} {row:<14} {t['median']:>13,.0f} {t_range:>21} {ratio(r, 'train_vs_eager'):>22} "
                f"{ratio(r, 'train_vs_torch.compile'):>22} {r['train_grad_rel_err_vs_eager']:>9.2e}{warn}"
            )
    return "\n".join(lines)


def generate_table(report: dict) -> str:
    lines = [
        f"{'model':<10} {'cache':<8} {'batch':>5} {'row':<14} {'tok/s median':>13} {'(min - max)':>21} "
        f"{'vs eager median':>16} {'(min - max)':>15}"
    ]
    for name, caches in report["generate"].items():
        for cache, batches in caches.items():
            if "skipped" in batches:
                lines.append(f"{name:<10} {cache:<8} skipped: {batches['skipped'][:80]}")
                continue
            for key, rows in batches.items():
                batch = key.replace("batch", "")
                for row, r in rows.items():
                    head = f"{name:<10} {cache:<8} {batch:>5} {row:<14}"
                    if "tokens_per_s" not in r:
                        why = r.get("skipped") or r.get("error") or "no timed round"
                        lines.append(f"{head} skipped: {why[:70]}")
                        continue
                    t = r["tokens_per_s"]
                    v = r.get("vs_eager")
                    vs = f"{v['median']:.2f}x" if v else "1.00x" if row == "eager" else "-"
                    vs_range = f"({v['min']:.2f} - {v['max']:.2f})" if v else ""
                    warn = ""
                    counts = r.get("in_timed_rounds") or {}
                    if counts.get("graphs_compiled") or counts.get("cudagraph_skips"):
                        warn = "  ! compiled/skipped cudagraphs in timed rounds"
                    if cache == "static" and r.get("compiled_by_generate") is False:
                        warn += "  ! generate() did not compile"
                    warm = r.get("warmup") or {}
                    for key in ("graph_breaks", "cudagraph_skips"):
                        if warm.get(key):
                            warn += f"  ! {warm[key]} {key.replace('_', ' ')} (JSON: reasons)"
                    if "error" in r:
                        warn += "  ! " + r["error"][:60]
                    t_range = f"({t['min']:,.1f} - {t['max']:,.1f})"
                    lines.append(f"{head} {t['median']:>13,.1f} {t_range:>21} {vs:>16} {vs_range:>15}{warn}")
    return "\n".join(lines)


def versions() -> dict:
    out = {"python": platform.python_version(), "torch": torch.__version__}
    for mod in ("transformers", "kernels", "triton", "liger_kernel"):
        try:
            module = __import__(mod)
            out[mod] = getattr(module, "__version__", "?")
        except Exception:  # noqa: BLE001  (absent or broken: not recorded)
            pass
    if "liger_kernel" in out and out["liger_kernel"] == "?":
        try:
            from importlib.metadata import version

            out["liger_kernel"] = version("liger-kernel")
        except Exception:  # noqa: BLE001
            pass
    return out


def free_memory(device: str) -> None:
    """Drop compiled code and CUDA-graph pools (torch._dynamo.reset), then the models
    (compiled calls make reference cycles: gc), then the allocator's cache."""
    torch._dynamo.reset()
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--mode", default=",".join(DEFAULT_MODES), help=f"comma list of {MODES}")
    ap.add_argument("--sizes", default="gemma-2b,gemma-7b", help=f"comma list of {list(SIZES)}")
    ap.add_argument("--rows", default=",".join(DEFAULT_ROWS), help=f"comma list of {ROWS}")
    ap.add_argument("--layers", type=int, help="decoder layers (default 8; the real models have 18 / 28)")
    ap.add_argument("--vocab", type=int, default=256000)
    ap.add_argument("--prefill", type=int, default=4096, help="prefill tokens (batch 1)")
    ap.add_argument("--batch", type=int, default=16, help="decode batch")
    ap.add_argument("--train-tokens", type=int, default=2048, help="train: tokens per step (batch 1)")
    ap.add_argument("--context", type=int, default=512, help="KV cache length when decoding starts")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=5, help="timed calls per row (train: per row and round)")
    ap.add_argument("--decode-steps", type=int, default=16)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--gen-tokens", type=int, default=64, help="generate(): new tokens per call (all rows)")
    ap.add_argument("--gen-prompt", type=int, default=128, help="generate(): prompt tokens")
    ap.add_argument("--gen-batches", default="1,8", help="generate(): comma list of batch sizes")
    ap.add_argument("--gen-caches", default=",".join(GEN_CACHES), help=f"generate(): comma list of {GEN_CACHES}")
    ap.add_argument("--rounds", type=int, help="generate() and train: interleaved timing rounds (default 3; --tiny: 1)")
    ap.add_argument(
        "--compile-backend", help="torch.compile backend of the compiled rows (default inductor; --tiny: eager)"
    )
    ap.add_argument("--cpu-static", action="store_true", help="run the static-cache generate() on CPU too")
    ap.add_argument("--tiny", action="store_true", help="tiny sizes and counts: a smoke test of this script")
    ap.add_argument(
        "--time-budget", type=float, default=400, help="seconds; phases not started by then are skipped"
    )
    ap.add_argument("--tag", default="", help="suffix of the JSON files' names (split runs do not overwrite)")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    args.start = time.time()
    args.rows = args.rows.split(",")
    args.modes = args.mode.split(",")
    for m in args.modes:
        if m not in MODES:
            ap.error(f"--mode: {m!r} is not one of {MODES}")
    for r in args.rows:
        if r not in ROWS:
            ap.error(f"--rows: {r!r} is not one of {ROWS}")
    args.step_modes = [m for m in args.modes if m in ("prefill", "decode")]
    args.gen_batches = [int(b) for b in args.gen_batches.split(",")]
    args.gen_caches = args.gen_caches.split(",")
    for c in args.gen_caches:
        if c not in GEN_CACHES:
            ap.error(f"--gen-caches: {c!r} is not one of {GEN_CACHES}")
    sizes = {n: SIZES[n] for n in args.sizes.split(",")}
    if args.tiny:
        sizes = {"tiny": TINY}
        args.vocab, args.prefill, args.batch, args.context, args.train_tokens = 128, 64, 4, 16, 64
        args.warmup, args.iters, args.decode_steps, args.reps = 2, 2, 4, 1
        args.gen_tokens, args.gen_prompt = 8, 16
        args.rounds = args.rounds or 1
        args.layers = args.layers or 2
        args.compile_backend = args.compile_backend or "eager"  # dynamo only: seconds, not minutes
    args.layers = args.layers or 8
    args.rounds = args.rounds or 3
    args.compile_backend = args.compile_backend or "inductor"
    device = args.device
    dtype = torch.bfloat16 if device == "cuda" else torch.float32

    report = {
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        **versions(),
        "dtype": str(dtype).replace("torch.", ""),
        "config": {k: v for k, v in vars(args).items() if k not in ("verbose", "start")},
        "models": {},
        "generate": {},
    }
    # generate() first, for every size: what --time-budget leaves out is the older
    # prefill / decode-step rows, then the training rows.
    phases = ((run_generate, "generate" in args.modes), (run_steps, bool(args.step_modes)),
              (run_train, "train" in args.modes))
    for run, wanted in phases:
        for name, size in sizes.items():
            if not wanted:
                continue
            key = "generate" if run is run_generate else "models"
            rows = report[key].setdefault(name, {})
            if over_budget(args):
                skipped = "train_skipped" if run is run_train else "skipped"
                why = {skipped: f"time budget of {args.time_budget:.0f} s spent"}
                for k in args.gen_caches if key == "generate" else args.rows:
                    rows.setdefault(k, {}).update(why)
                log(f"{name} {run.__name__}: {why['skipped']}")
                continue
            with phase(args, f"{name} build"):
                base = build_model(size, args.layers, args.vocab, device, dtype)
            for k, v in run(name, base, args, device).items():  # a row's training figures join its others
                rows.setdefault(k, {}).update(v)
            del base
            free_memory(device)
    report["seconds"] = round(elapsed(args), 1)

    text = json.dumps(report, indent=2, default=str)
    results = REPO / "benchmarks" / "results"
    results.mkdir(parents=True, exist_ok=True)
    tag = f"_{args.tag}" if args.tag else ""
    if not args.tiny:
        (results / f"models_{device_short(device)}{tag}.json").write_text(text + "\n")
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], f"models_bench{tag}.json").write_text(text + "\n")
    print()
    print(f"{report['device']}, {report['dtype']}, {args.layers} decoder layers, vocab {args.vocab}, {report['date']}")
    if report["models"] and args.step_modes:
        print(f"prefill {args.prefill} tokens (batch 1), decode batch {args.batch} at context {args.context}")
        print(steps_table(report))
        print()
    if report["models"] and "train" in args.modes:
        print(f"training step of {args.train_tokens} tokens (batch 1), {args.iters} steps a row in each of "
              f"{args.rounds} interleaved rounds; tok/s = tokens / a round's median step")
        print(train_table(report))
        print()
    if report["generate"]:
        print(
            f"generate(): greedy, prompt {args.gen_prompt}, {args.gen_tokens} new tokens, "
            f"{args.rounds} interleaved rounds; tok/s = batch x new tokens / wall time of the call"
        )
        print(generate_table(report))
    print(f"\n{report['seconds']:.0f} s in all", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
