"""Speed up a Transformers GeGLU model with geglu's layers: `kernels.kernelize`.

    python -m tools.build && python example.py      # this checkout's build/ (CPU or GPU)
    python example.py --source hub                  # org/geglu v1 from the Hub; with
                                                    # HF_HUB_OFFLINE=1, from the HF cache
    python example.py --model t5 --device cuda --dtype bfloat16

Builds a small Gemma (or T5 v1.1, or BERT) with random weights, kernelizes a copy
with geglu's layers and checks that its logits and greedy tokens match the original.
The part between the `recipe` markers is the README's "Use with Transformers"
section, verbatim (tests/integration/test_transformers.py checks that, and runs this file).
"""

import argparse
import copy
import sys

# --8<-- [start:recipe]
from pathlib import Path

from kernels import (
    LayerRepository,
    LocalLayerRepository,
    Mode,
    kernelize,
    replace_kernel_forward_from_hub,
    use_kernel_mapping,
)
from transformers.activations import GELUActivation, GELUTanh, NewGELUActivation
from transformers.integrations.finegrained_fp8 import FP8Linear
from transformers.models.bert.modeling_bert import BertIntermediate
from transformers.models.gemma.modeling_gemma import GemmaMLP
from transformers.models.gemma2.modeling_gemma2 import Gemma2MLP
from transformers.models.gemma3.modeling_gemma3 import Gemma3MLP
from transformers.models.gemma4.modeling_gemma4 import Gemma4TextMLP
from transformers.models.t5.modeling_t5 import T5DenseGatedActDense
from transformers.models.t5gemma.modeling_t5gemma import T5GemmaMLP
from transformers.models.vaultgemma.modeling_vaultgemma import VaultGemmaMLP

# 1. Hub layer names for the modules geglu replaces. Transformers names its GELU
#    classes itself when its kernels integration is active, and no MLP at all:
#    name the rest (kernelize swaps only modules that carry a name).
HUB_LAYER_NAMES = {
    GemmaMLP: "GeGLUMLP",  # the name Transformers' own mapping uses for GeGLU MLPs
    Gemma2MLP: "GeGLUMLP",
    Gemma3MLP: "GeGLUMLP",
    Gemma4TextMLP: "GeGLUMLP",  # Gemma 4's dense MLP (its double-wide layers too)
    VaultGemmaMLP: "GeGLUMLP",
    T5GemmaMLP: "T5GemmaMLP",  # T5Gemma's MLP (a dropout between the projections)
    T5DenseGatedActDense: "T5GatedGeluDense",  # T5 v1.1 / Flan-T5 feed-forward
    BertIntermediate: "BiasGeluIntermediate",  # BERT's dense + GELU
    FP8Linear: "FP8Linear",  # every other linear of a FineGrainedFP8Config model
    GELUTanh: "GeluTanh",
    NewGELUActivation: "NewGELU",
    GELUActivation: "GeLU",
}
for module_class, hub_name in HUB_LAYER_NAMES.items():
    if getattr(module_class, "kernel_layer_name", None) is None:
        replace_kernel_forward_from_hub(module_class, hub_name)


# 2. Where a layer comes from: org/geglu version 1 on the Hub, or a local build.
def hub_layer(layer_name):
    return LayerRepository("org/geglu", layer_name=layer_name, version=1, trust_remote_code=["org/geglu"])


def local_layer(layer_name, path=Path(__file__).resolve().parent):
    return LocalLayerRepository(repo_path=path, layer_name=layer_name)  # a checkout with build/


# 3. Hub name -> device -> mode -> geglu layer.
def geglu_mapping(layer=hub_layer):
    mapping = {}
    # Fused-GEMM layers have a backward and compile: one entry serves every mode.
    # (FP8Linear keeps the original forward where it needs a gradient: docs/TRANSFORMERS.md.)
    for hub_name in ("GeGLUMLP", "T5GemmaMLP", "T5GatedGeluDense", "BiasGeluIntermediate", "FP8Linear"):
        mapping[hub_name] = {device: layer(hub_name) for device in ("cuda", "cpu")}
    # Standalone activations have no backward: inference only, so in Mode.TRAINING
    # kernelize keeps the original forward.
    for hub_name, layer_name in (("GeluTanh", "GeluTanh"), ("NewGELU", "GeluTanh"), ("GeLU", "Gelu")):
        inference_modes = (Mode.INFERENCE, Mode.INFERENCE | Mode.TORCH_COMPILE)
        mapping[hub_name] = {
            device: {mode: layer(layer_name) for mode in inference_modes} for device in ("cuda", "cpu")
        }
    return mapping


# 4. Swap the forwards. Mode.TRAINING for training; add Mode.TORCH_COMPILE when the
#    model will go through torch.compile.
def kernelize_with_geglu(model, mode=Mode.INFERENCE, layer=hub_layer):
    with use_kernel_mapping(geglu_mapping(layer)):
        return kernelize(model, mode=mode)  # device: the model's
# --8<-- [end:recipe]


# --8<-- [start:transformers-switch]
# Transformers' own switch, `use_kernels=True` with a KernelConfig. It needs a
# `kernels` release inside the range the installed Transformers supports (outside it
# use_kernels=True raises ValueError) and an accelerator: KernelConfig takes
# cuda/rocm/xpu/... devices, not cpu. inherit_mapping=False uses geglu's layer alone,
# not also Transformers' default Hub kernels (which it would download).
def geglu_kernel_config(local_path=None):
    from transformers import KernelConfig

    if local_path is not None:  # a local checkout with build/
        return KernelConfig({"GeGLUMLP": f"{local_path}:GeGLUMLP"}, use_local_kernel=True)
    # trust_remote_code is a bool here (Transformers 5.22 refuses an allow-list); True
    # trusts this entry's repository, org/geglu, alone.
    repo = ("org/geglu:GeGLUMLP", {"version": 1, "trust_remote_code": True})
    return KernelConfig({"GeGLUMLP": repo}, inherit_mapping=False)


def from_pretrained_with_geglu(checkpoint, device="cuda"):
    from transformers import AutoModelForCausalLM

    # (Transformers 5.22's from_pretrained mishandles use_local_kernel=True configs:
    # load, then enable_geglu_kernels(model, local_path) for a local build.)
    return AutoModelForCausalLM.from_pretrained(  # device_map needs `accelerate`
        checkpoint, use_kernels=True, kernel_config=geglu_kernel_config(), device_map=device
    )


def enable_geglu_kernels(model, local_path=None):  # a model already on its accelerator
    model.set_use_kernels(True, geglu_kernel_config(local_path))
    return model
# --8<-- [end:transformers-switch]


# --------------------------------------------------------------------------- demo models


def tiny_model(kind: str, *, seed: int = 0, dropout: float = 0.0):
    """A small model of a real Transformers class with random weights (nothing to
    download): hidden 64, 2 layers, vocabulary 128."""
    import torch
    import transformers as tf

    torch.manual_seed(seed)
    common = dict(vocab_size=128, num_attention_heads=4)
    if kind in ("gemma", "gemma2", "gemma3"):
        cfg_cls, model_cls = {
            "gemma": (tf.GemmaConfig, tf.GemmaForCausalLM),
            "gemma2": (tf.Gemma2Config, tf.Gemma2ForCausalLM),
            "gemma3": (tf.Gemma3TextConfig, tf.Gemma3ForCausalLM),
        }[kind]
        config = cfg_cls(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_key_value_heads=1,
            head_dim=16,
            attention_dropout=dropout,
            **common,
        )
        return model_cls(config)
    if kind == "gemma4":  # 3 layers, the last sharing the KV cache with a double-wide MLP
        config = tf.Gemma4TextConfig(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=3,
            layer_types=["sliding_attention", "full_attention", "full_attention"],
            num_kv_shared_layers=1,
            use_double_wide_mlp=True,
            num_key_value_heads=1,
            head_dim=16,
            attention_dropout=dropout,
            **common,
        )
        return tf.Gemma4ForCausalLM(config)
    if kind == "vaultgemma":
        config = tf.VaultGemmaConfig(
            hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_key_value_heads=1, head_dim=16,
            attention_dropout=dropout, **common,
        )  # fmt: skip
        return tf.VaultGemmaForCausalLM(config)
    if kind == "t5gemma":  # 2 encoder + 2 decoder layers
        side = tf.T5GemmaModuleConfig(
            hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_key_value_heads=1, head_dim=16,
            dropout_rate=dropout, attention_dropout=dropout, **common,
        )  # fmt: skip
        return tf.T5GemmaForConditionalGeneration(tf.T5GemmaConfig(encoder=side, decoder=side, vocab_size=128))
    if kind == "t5":
        config = tf.T5Config(
            d_model=64,
            d_kv=16,
            d_ff=128,
            num_layers=2,
            num_heads=4,
            vocab_size=128,
            feed_forward_proj="gated-gelu",  # T5 v1.1: gelu_new(wi_0 x) * wi_1 x
            dropout_rate=dropout,
            decoder_start_token_id=0,
            pad_token_id=0,
            eos_token_id=1,
        )
        return tf.T5ForConditionalGeneration(config)
    if kind == "bert":
        config = tf.BertConfig(
            hidden_size=64,
            num_hidden_layers=2,
            intermediate_size=128,
            hidden_dropout_prob=dropout,
            attention_probs_dropout_prob=dropout,
            **common,
        )
        return tf.BertForMaskedLM(config)
    raise ValueError(f"model kind must be one of gemma, gemma2, gemma3, t5, bert; got {kind!r}")


def model_inputs(model, batch: int = 2, seq: int = 12, seed: int = 1) -> dict:
    """Random token ids (and decoder ids for an encoder-decoder) on the model's device."""
    import torch

    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, model.config.vocab_size, (batch, seq), generator=g).to(model.device)
    inputs = {"input_ids": ids}
    if model.config.is_encoder_decoder:
        dec = torch.randint(2, model.config.vocab_size, (batch, seq // 2), generator=g).to(model.device)
        inputs["decoder_input_ids"] = dec
    return inputs


def count_kernelized(model) -> dict:
    """{hub name: number of modules whose forward is now a geglu layer's}."""
    counts: dict = {}
    for module in model.modules():
        forward = getattr(module.forward, "__func__", None)
        name = getattr(type(module), "kernel_layer_name", None)
        if name is not None and forward is not None and forward is not type(module).forward:
            counts[name] = counts.get(name, 0) + 1
    return counts


def main(argv=None) -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", choices=("local", "hub"), default="local", help="local build/ or org/geglu v1")
    ap.add_argument("--model", choices=("gemma", "gemma2", "gemma3", "gemma4", "vaultgemma", "t5gemma", "t5", "bert"),
                    default="gemma")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), help="default: bfloat16 on GPU")
    args = ap.parse_args(argv)

    dtype = getattr(torch, args.dtype or ("float32" if args.device == "cpu" else "bfloat16"))
    # On CPU in float32 kernels and eager agree to rounding; GPU GEMMs round (bf16, or
    # TF32 for float32), so there a near-tie may flip a greedy token.
    exact = args.device == "cpu" and dtype == torch.float32
    original = tiny_model(args.model).to(args.device, dtype).eval()
    model = kernelize_with_geglu(
        copy.deepcopy(original), mode=Mode.INFERENCE, layer=hub_layer if args.source == "hub" else local_layer
    )
    swapped = count_kernelized(model)
    print(f"{args.model} on {args.device} ({dtype}), layers from {args.source}: kernelized {swapped}")

    inputs = model_inputs(model)
    with torch.no_grad():
        ref = original(**inputs).logits.float()
        out = model(**inputs).logits.float()
    err = ((out - ref).abs().max() / ref.abs().max()).item()
    print(f"logits: max |kernelized - original| / max |original| = {err:.2e}")
    ok = bool(swapped) and err < (1e-4 if exact else 3e-2)

    if args.model != "bert":
        gen = dict(max_new_tokens=8, do_sample=False)
        prompt = {k: v for k, v in inputs.items() if k != "decoder_input_ids"}
        with torch.no_grad():
            tokens_ref = original.generate(**prompt, **gen)
            tokens = model.generate(**prompt, **gen)
        same = torch.equal(tokens_ref, tokens)
        verdict = "same tokens" if same else "DIFFERENT tokens"
        print(f"greedy generate, {gen['max_new_tokens']} new tokens: {verdict}")
        ok = ok and (same or not exact)
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
