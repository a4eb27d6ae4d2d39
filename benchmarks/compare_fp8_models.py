"""Whole-model speed and accuracy of a Gemma loaded as FP8 checkpoints are (Transformers'
FineGrainedFP8 layout) and kernelized with geglu, against the same bf16 model.

A Gemma-2B- or Gemma-7B-sized GemmaForCausalLM at reduced depth (random weights, bf16)
runs as:

  bf16 eager        Transformers as is
  bf16 geglu        kernelized with geglu's layers (example.py's recipe)
  fp8 geglu         the default FineGrainedFP8Config(): every nn.Linear but lm_head an
                    FP8Linear (e4m3 weights, float32 scales per 128x128 block), kernelized
                    with the same recipe: GeGLUMLP runs geglu_mlp_fp8, every other
                    FP8Linear (attention's q/k/v/o) geglu's FP8Linear layer (fp8_linear)
  fp8 geglu MLP     only the MLPs' projections FP8 (modules_to_not_convert: attention,
                    lm_head, embeddings), kernelized: the FP8 MLP alone
  fp8 transformers  (--transformers-route) the default-config model not kernelized:
                    Transformers' own FP8 route (the Hub kernel kernels-community/
                    finegrained-fp8, and DeepGEMM where loadable), which needs that kernel
                    loadable (the Hub, or a local copy through LOCAL_KERNELS)
  no MLP            (--bound) the bf16 model with each MLP's output replaced by zeros

On CUDA the FP8 models are the bf16 one saved and reloaded with FineGrainedFP8Config.
`--swap` (and any CPU run) builds the same FP8Linear modules in place instead, quantizing
each weight by the rule Transformers' quantizer applies (scale = amax / 448 per block).
The kernelized FP8 rows check that every FP8Linear took geglu's layer; an FP8Linear that
fell back to its own forward would need Transformers' Hub kernels, which an offline
machine does not have.

Measured: prefill tokens/s (one forward over --prefill tokens, batch 1, logits for the
last token only), `generate()` tokens/s (greedy, a 128-token prompt, --gen-tokens new
tokens, batch 1 and 8, the dynamic cache and, on CUDA, the static cache, with which
generate() compiles each row's decode step), in --rounds interleaved rounds (median and
min-max; ratios to bf16 eager within each round), and each model's last-position logits
against bf16 eager: relative error and top-1 agreement over a batch of prompts.

    python benchmarks/compare_fp8_models.py --size gemma-7b --layers 8
    python benchmarks/compare_fp8_models.py --device cpu --tiny     # smoke test of the script

JSON to $OUT/fp8_models.json (when OUT is set); a table prints last.
"""

import argparse
import copy
import datetime
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_models import (  # noqa: E402
    REPO, SIZES, build_model, example, generate_once, prefill_tokens_per_s, raise_recompile_limit, sync,
)

TINY = dict(hidden_size=256, intermediate_size=512, num_attention_heads=2, num_key_value_heads=1, head_dim=128)
ROWS = ["bf16 eager", "bf16 geglu", "fp8 geglu", "fp8 geglu MLP"]
MLP_PROJECTIONS = ("gate_proj", "up_proj", "down_proj")
ATTENTION_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")


def quantize_blocks(w: torch.Tensor):
    """A weight to e4m3 with a float32 scale per 128x128 block (Transformers' rule)."""
    n, k = w.shape
    b = w.float().reshape(n // 128, 128, k // 128, 128)
    scale = b.abs().amax(dim=(1, 3)).clamp(min=1e-12) / 448.0
    q = (b / scale[:, None, :, None]).clamp(-448, 448).to(torch.float8_e4m3fn).reshape(n, k)
    return q, scale.contiguous()


def fp8_linear_like(lin):
    """An FP8Linear holding lin's weight quantized per 128x128 block."""
    from transformers.integrations.finegrained_fp8 import FP8Linear

    fp8 = FP8Linear(lin.in_features, lin.out_features, has_bias=lin.bias is not None, block_size=(128, 128),
                    activation_scheme="dynamic").to(lin.weight.device)
    q, s = quantize_blocks(lin.weight.data)
    fp8.weight = torch.nn.Parameter(q, requires_grad=False)
    fp8.weight_scale_inv = torch.nn.Parameter(s, requires_grad=False)
    if lin.bias is not None:
        fp8.bias = torch.nn.Parameter(lin.bias.data.clone(), requires_grad=False)
    return fp8


def swap_in_fp8(model, mlp_only: bool):
    """Each decoder layer's projections (the MLP's only, or also the attention's)
    replaced by FP8Linear modules, as FineGrainedFP8Config loads them."""
    for layer in model.model.layers:
        parts = [(layer.mlp, MLP_PROJECTIONS)]
        if not mlp_only:
            parts.append((layer.self_attn, ATTENTION_PROJECTIONS))
        for parent, names in parts:
            for name in names:
                setattr(parent, name, fp8_linear_like(getattr(parent, name)))
    return model


class NoMLP(torch.nn.Module):
    """An MLP that costs nothing: the bound row's stand-in (one fill kernel)."""

    def forward(self, x):
        return torch.zeros_like(x)


def without_mlps(model):
    for layer in model.model.layers:
        layer.mlp = NoMLP()
    return model


def reload_fp8(model, mlp_only: bool):
    """The model saved and reloaded with FineGrainedFP8Config: the default (every Linear
    but lm_head) or, mlp_only, the MLPs' projections alone."""
    from transformers import AutoModelForCausalLM, FineGrainedFP8Config

    # Patterns match from the name's start (or as a suffix): "model.layers.0.self_attn.q_proj".
    config = (FineGrainedFP8Config(modules_to_not_convert=[r".*self_attn", "lm_head", r".*embed_tokens"])
              if mlp_only else FineGrainedFP8Config())
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        return AutoModelForCausalLM.from_pretrained(tmp, quantization_config=config, dtype=torch.bfloat16,
                                                    device_map=str(model.device)).eval()


def fp8_model(base, args, mlp_only: bool):
    model = (swap_in_fp8(copy.deepcopy(base), mlp_only) if args.swap or args.device != "cuda"
             else reload_fp8(base, mlp_only))
    expected = (3 if mlp_only else 7) * args.layers
    n_fp8 = sum(type(m).__name__ == "FP8Linear" for m in model.modules())
    if n_fp8 != expected:
        raise RuntimeError(f"{n_fp8} FP8Linear modules, expected {expected}")
    return model


def make_rows(base, args):
    from kernels import Mode

    def kernelized(model):
        return example.kernelize_with_geglu(model, mode=Mode.INFERENCE, layer=example.local_layer)

    rows = {"bf16 eager": base, "bf16 geglu": kernelized(copy.deepcopy(base))}
    rows["fp8 geglu"] = kernelized(fp8_model(base, args, mlp_only=False))
    rows["fp8 geglu MLP"] = kernelized(fp8_model(base, args, mlp_only=True))
    if args.transformers_route:
        rows["fp8 transformers"] = fp8_model(base, args, mlp_only=False)
    if args.bound:
        rows["no MLP"] = without_mlps(copy.deepcopy(base))
    for name, model in rows.items():
        if name in ("bf16 geglu", "fp8 geglu", "fp8 geglu MLP"):
            counts = example.count_kernelized(model)
            if counts.get("GeGLUMLP", 0) != args.layers:
                raise RuntimeError(f"{name}: {counts.get('GeGLUMLP', 0)} of {args.layers} MLPs kernelized")
            n_fp8 = sum(type(m).__name__ == "FP8Linear" for m in model.modules())
            if counts.get("FP8Linear", 0) != n_fp8:
                raise RuntimeError(f"{name}: {counts.get('FP8Linear', 0)} of {n_fp8} FP8Linear modules kernelized")
    return rows


@torch.no_grad()
def logits_agreement(rows, vocab, device, batch=8, length=256):
    """The FP8 model's last-position logits against bf16 eager's (and bf16 geglu's, for scale)."""
    torch.manual_seed(1)
    ids = torch.randint(0, vocab, (batch, length), device=device)
    ref = rows["bf16 eager"](input_ids=ids, logits_to_keep=1).logits.float()
    out = {}
    for name in (n for n in rows if n not in ("bf16 eager", "no MLP")):
        got = rows[name](input_ids=ids, logits_to_keep=1).logits.float()
        out[name] = dict(rel_err=((got - ref).norm() / ref.norm()).item(),
                         top1_agreement=(got.argmax(-1) == ref.argmax(-1)).float().mean().item())
    return out


def spread(values):
    values = sorted(values)
    return dict(median=statistics.median(values), min=values[0], max=values[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", choices=sorted(SIZES), default="gemma-7b")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tiny", action="store_true", help="a tiny model (smoke test)")
    ap.add_argument("--swap", action="store_true", help="build the FP8 MLPs in place instead of reloading")
    ap.add_argument("--prefill", type=int, default=4096)
    ap.add_argument("--gen-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--bound", action="store_true", help="add the 'no MLP' row")
    ap.add_argument("--transformers-route", action="store_true",
                    help="add the unkernelized default-config FP8 model (needs kernels-community/finegrained-fp8)")
    args = ap.parse_args()
    if args.tiny:
        args.prefill, args.gen_tokens, args.rounds, args.vocab = 64, 4, 1, 512
    os.environ.setdefault("LOCAL_KERNELS", f"org/geglu={REPO}")
    size = TINY if args.tiny else SIZES[args.size]
    base = build_model(size, args.layers, args.vocab, args.device, torch.bfloat16)
    rows = make_rows(base, args)
    names = ROWS + ["fp8 transformers"] * args.transformers_route + ["no MLP"] * args.bound
    warm, iters = (1, 1) if args.tiny else (3, 10)
    results = {"device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
               "torch": torch.__version__, "date": datetime.date.today().isoformat(),
               "size": "tiny" if args.tiny else args.size,
               "layers": args.layers, "tiny": args.tiny, "rounds": args.rounds,
               "fp8_load": "swap" if args.swap or args.device != "cuda" else "FineGrainedFP8Config reload",
               "transformers": __import__("transformers").__version__}
    results["logits_vs_bf16_eager"] = logits_agreement(rows, args.vocab, args.device)

    torch.manual_seed(2)
    prefill_ids = torch.randint(0, args.vocab, (1, args.prefill), device=args.device)
    gen_kw = dict(max_new_tokens=args.gen_tokens, min_new_tokens=args.gen_tokens, do_sample=False, use_cache=True,
                  pad_token_id=0)
    # (batch, cache): the static cache makes generate() compile each row's decode step
    # (CUDA graphs included), on CUDA only (on CPU it would compile for minutes).
    cases = {"prefill": None, "generate b1": (1, "dynamic"), "generate b8": (8, "dynamic")}
    if args.device == "cuda" and not args.tiny:
        cases.update({"generate b1 static": (1, "static"), "generate b8 static": (8, "static")})
        raise_recompile_limit()
    samples = {case: {row: [] for row in names} for case in cases}
    ratios = {case: {row: [] for row in names} for case in cases}
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]  # rotated: drift reaches every row
        for case, how in cases.items():
            per_round = {}
            for row in order:
                model = rows[row]
                if how is None:
                    rate = prefill_tokens_per_s(model, prefill_ids, args.device, warm, iters)
                else:
                    batch, cache = how
                    kw = dict(gen_kw, cache_implementation="static") if cache == "static" else gen_kw
                    prompt = torch.randint(0, args.vocab, (batch, 128), device=args.device)
                    for _ in range(2 if cache == "static" else 1):  # warm-up: compile, CUDA-graph recording
                        generate_once(model, prompt, kw, args.device)
                    seconds, new = generate_once(model, prompt, kw, args.device)
                    rate = new.numel() / seconds
                per_round[row] = rate
                samples[case][row].append(rate)
            for row in names:
                ratios[case][row].append(per_round[row] / per_round["bf16 eager"])
    sync(args.device)
    results["tokens_per_s"] = {case: {row: spread(v) for row, v in rs.items()} for case, rs in samples.items()}
    results["vs_bf16_eager"] = {case: {row: spread(v) for row, v in rs.items()} for case, rs in ratios.items()}
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "fp8_models.json").write_text(json.dumps(results, indent=1))
    print(f"\n{results['device']}, {results['size']} x {args.layers} layers, FP8 modules by {results['fp8_load']}")
    print("| case | " + " | ".join(names) + " |")
    for case in cases:
        cells = [f"{results['tokens_per_s'][case][row]['median']:.0f} tok/s "
                 f"({results['vs_bf16_eager'][case][row]['median']:.2f}x)" for row in names]
        print(f"| {case} | " + " | ".join(cells) + " |")
    for name, v in results["logits_vs_bf16_eager"].items():
        print(f"{name} logits vs bf16 eager: rel err {v['rel_err']:.4f}, top-1 agreement {v['top1_agreement']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
