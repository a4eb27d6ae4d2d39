"""geglu_mlp_fp8 (fp8_mlp.py) and GeGLUMLP over Transformers' FP8Linear projections,
against a float64 reference written here.

The reference dequantizes the FP8 weights in float64 and quantizes x and h by the
documented rule: per row, per 128 columns, amax and scale = amax / 448 in float32, q =
float8_e4m3fn(clamp(v / scale)) (torch's cast: round to nearest even); everything else
(the GEMMs, the GELU, the product, the residual) in float64. The function must match it
far more closely than either matches the unquantized MLP (the quantization error itself:
about 6% relative RMS on these inputs, FP8's 3-bit mantissa on both GEMMs' operands):

- CPU, the composite: the only differences are float32 GEMM accumulation (~1e-6), the
  output's rounding to bfloat16 / float16 (half an ulp: 2^-9 / 2^-12 relative) and, rarely,
  an h element whose float32 and float64 values fall on either side of an FP8 rounding
  boundary (one element of hidden moves by one FP8 ulp). Bound: |err| <= 2^-8 (bf16) /
  2^-11 (fp16) * |ref| + 2e-3 * max|ref row| element-wise (measured: relative RMS 1.7e-3
  in bf16, 2e-4 in fp16, against 6e-2 for the quantization).
- CUDA, the fused kernels: the tensor cores' FP8 products accumulate in a reduced-precision
  float32 within each 128-wide K block (then promoted), so h differs from the float32 h
  by ~1e-5 relative, and a few h elements per row (hidden up to 24576) round to the other
  FP8 neighbour. Bound: relative RMS error per row <= 1e-2 and max error <= 3e-2 * max
  |ref row|, and below a quarter of the quantization error measured on the same inputs.

CUDA tests are marked `cuda` (reported as skipped without a GPU); those that need the
fused kernels also skip, with the reason, where the build has no `_geglu_mlp_fp8` op or
the GPU is not sm_90. The functional API is checked on any GPU.
"""

import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import HAS_CUDA, spy

FP8 = torch.float8_e4m3fn
DTYPES = [torch.bfloat16, torch.float16]
APPROX = ["tanh", "none"]
# Element-wise relative bound of the composite: one ulp of the output dtype.
OUT_RTOL = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}
ROW_ATOL = 2e-3  # times max |ref| of the row: float32 GEMMs and rare h rounding flips


# --------------------------------------------------------------------------- inputs


def quantize_blocks(w: torch.Tensor):
    """(q, scale) of a [n, k] weight with 128x128 block scales, as Transformers'
    Fp8Quantize does: scale = amax / 448 per block (weight_scale_inv), q = w / scale."""
    n, k = w.shape
    blocks = w.float().reshape(n // 128, 128, k // 128, 128)
    amax = blocks.abs().amax(dim=(1, 3))
    scale = torch.where(amax > 0, amax / 448.0, torch.ones_like(amax))
    q = (blocks / scale[:, None, :, None]).clamp(-448, 448).to(FP8).reshape(n, k)
    return q, scale


def fp8_weight(n, k, seed, device="cpu"):
    """(bf16 weight, its FP8 q, its float32 block scales). Block magnitudes spread over
    about two decades, so a scale applied to the wrong block shows."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g, dtype=torch.float64) * k**-0.5
    spread = torch.exp(0.7 * torch.randn(n // 128, 1, k // 128, 1, generator=g, dtype=torch.float64))
    w = (w.reshape(n // 128, 128, k // 128, 128) * spread).reshape(n, k).to(torch.bfloat16)
    q, s = quantize_blocks(w)
    return w.to(device), q.to(device), s.to(device)


def rand(shape, dtype, seed, device="cpu", scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(device=device, dtype=dtype)


def mlp_inputs(m, k, hidden, n_out, dtype, seed=0, device="cpu", residual=False, lead=None):
    """x [m, k] (or [*lead, k]), the three FP8 weights with scales, a residual or None,
    and the unquantized bf16 weights."""
    shape = (*lead, k) if lead else (m, k)
    x = rand(shape, dtype, seed, device)
    wg, qg, sg = fp8_weight(hidden, k, seed + 1, device)
    wu, qu, su = fp8_weight(hidden, k, seed + 2, device)
    wd, qd, sd = fp8_weight(n_out, hidden, seed + 3, device)
    res = rand((*shape[:-1], n_out), dtype, seed + 4, device) if residual else None
    return x, (qg, sg, qu, su, qd, sd), res, (wg, wu, wd)


# --------------------------------------------------------------------------- float64 reference


def quantize_rows_ref(v: torch.Tensor) -> torch.Tensor:
    """The documented activation quantization, dequantized to float64: amax, scale and
    v / scale in float32 (as specified), the product q * scale in float64."""
    rows, cols = v.shape
    g = v.float().reshape(rows, cols // 128, 128)
    amax = g.abs().amax(dim=-1, keepdim=True)
    # A tensor divisor: CUDA torch divides by a Python scalar as a multiply by its
    # reciprocal, one ulp off at times, which would move exact ties of bf16 inputs.
    scale = torch.where(amax > 0, amax / torch.full_like(amax, 448.0), torch.ones_like(amax))
    q = (g / scale).clamp(-448.0, 448.0).to(FP8)
    return (q.double() * scale.double()).reshape(rows, cols)


def dequantize_ref(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return q.double() * scale.double().repeat_interleave(128, 0).repeat_interleave(128, 1)


def ref64(x, weights, residual, approximate):
    """geglu_mlp_fp8 in float64 (see the module docstring)."""
    qg, sg, qu, su, qd, sd = weights
    x2 = x.reshape(-1, x.shape[-1])
    xq = quantize_rows_ref(x2)
    gate = xq @ dequantize_ref(qg, sg).T
    up = xq @ dequantize_ref(qu, su).T
    h = F.gelu(gate, approximate=approximate) * up
    y = quantize_rows_ref(h) @ dequantize_ref(qd, sd).T
    if residual is not None:
        y = y + residual.reshape(y.shape).double()
    return y.reshape(*x.shape[:-1], qd.shape[0])


def unquantized64(x, raw_weights, residual, approximate):
    """The MLP on the bf16 weights before quantization and on x as given, in float64."""
    wg, wu, wd = (w.double() for w in raw_weights)
    x64 = x.double()
    y = (F.gelu(x64 @ wg.T, approximate=approximate) * (x64 @ wu.T)) @ wd.T
    return y if residual is None else y + residual.double()


def rel_rms(a, b) -> float:
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def assert_matches_ref(out, ref, dtype, what=""):
    """The composite's bound: |err| <= one ulp of dtype * |ref| + ROW_ATOL * max |ref row|."""
    assert out.shape == ref.shape and out.dtype == dtype, (what, out.shape, ref.shape, out.dtype)
    assert out.isfinite().all(), f"{what}: non-finite elements"
    o, r = out.double().reshape(-1, ref.shape[-1]), ref.reshape(-1, ref.shape[-1])
    err = (o - r).abs()
    bound = OUT_RTOL[dtype] * r.abs() + ROW_ATOL * r.abs().amax(dim=-1, keepdim=True)
    worst = (err / bound.clamp_min(1e-30)).max().item()
    assert worst <= 1.0, f"{what}: error {worst:.3g}x the bound (max err {err.max().item():.3g})"


# --------------------------------------------------------------------------- the composite (CPU)

SHAPES = [(128, 128, 128), (128, 384, 256), (384, 256, 384)]


@pytest.mark.parametrize("approximate", APPROX)
@pytest.mark.parametrize("residual", [False, True], ids=["", "residual"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("m", [1, 7, 129])
def test_composite_matches_float64_reference(kernel, m, shape, dtype, residual, approximate):
    k, hidden, n_out = shape
    x, weights, res, _ = mlp_inputs(m, k, hidden, n_out, dtype, seed=m + k, residual=residual)
    y = kernel.geglu_mlp_fp8(x, *weights, residual=res, approximate=approximate)
    assert_matches_ref(y, ref64(x, weights, res, approximate), dtype, f"M={m} {shape}")


def test_composite_leading_dims_and_strided_operands(kernel):
    """x of any leading dims (3-d, and a transposed view), transposed-view weights and
    scales: the same values as the 2-d contiguous call."""
    x, weights, res, _ = mlp_inputs(0, 256, 384, 128, torch.bfloat16, seed=3, residual=True, lead=(2, 5))
    y = kernel.geglu_mlp_fp8(x, *weights, residual=res)
    assert y.shape == (2, 5, 128)
    assert_matches_ref(y, ref64(x, weights, res, "tanh"), torch.bfloat16, "3-d")
    xt = x.transpose(0, 1).contiguous().transpose(0, 1)
    strided = [t.t().contiguous().t() for t in weights]
    assert torch.equal(kernel.geglu_mlp_fp8(xt, *strided, residual=res), y)
    y2 = kernel.geglu_mlp_fp8(x.reshape(10, 256), *weights, residual=res.reshape(10, 128))
    assert torch.equal(y2.reshape(2, 5, 128), y)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
def test_quantization_error_is_a_few_percent(kernel, dtype):
    """Sanity of the whole setup: against the unquantized float64 MLP the reference is off
    by a few percent (FP8's 3-bit mantissa), the composite by no more than twice that,
    and the composite is far closer to the reference than that."""
    x, weights, res, raw = mlp_inputs(64, 384, 768, 256, dtype, seed=11)
    y = kernel.geglu_mlp_fp8(x, *weights)
    true = unquantized64(x, raw, None, "tanh")
    ref = ref64(x, weights, None, "tanh")
    e_ref = rel_rms(ref, true)
    assert 5e-3 < e_ref < 0.15, e_ref
    assert rel_rms(y, true) < 2 * e_ref
    assert rel_rms(y, ref) < 0.25 * e_ref


def test_quantize_rows_1x128(kernel):
    """The helper's contract: q float8_e4m3fn [rows, cols], scale float32 [rows, cols/128]
    = amax / 448 (1.0 for an all-zero group), and each group's amax maps to +-448."""
    v = rand((3, 384), torch.bfloat16, seed=5)
    v[1, 128:256] = 0
    q, scale = kernel.fp8_mlp.quantize_rows_1x128(v)
    assert q.dtype == FP8 and q.shape == (3, 384)
    assert scale.dtype == torch.float32 and scale.shape == (3, 3)
    amax = v.float().reshape(3, 3, 128).abs().amax(-1)
    assert torch.equal(scale[amax > 0], (amax / 448)[amax > 0]) and scale[1, 1] == 1.0
    assert torch.equal(q.float().reshape(3, 3, 128).abs().amax(-1)[amax > 0], torch.full((8,), 448.0))
    deq = (q.double().reshape(3, 3, 128) * scale.double()[..., None]).reshape(3, 384)
    assert torch.equal(deq, quantize_rows_ref(v))


def test_zero_rows_and_groups(kernel):
    """amax 0 (a zero row, a zero group): scale 1, finite outputs equal to the reference
    (a zero row gives exactly the residual)."""
    x, weights, res, _ = mlp_inputs(6, 256, 256, 128, torch.bfloat16, seed=7, residual=True)
    x[2] = 0
    x[4, 128:] = 0
    y = kernel.geglu_mlp_fp8(x, *weights, residual=res)
    assert_matches_ref(y, ref64(x, weights, res, "tanh"), torch.bfloat16, "zero rows")
    assert torch.equal(y[2], res[2])
    assert torch.equal(kernel.geglu_mlp_fp8(x[2:3], *weights), torch.zeros(1, 128, dtype=torch.bfloat16))


def test_row_with_one_huge_value(kernel):
    """One huge element sets its group's scale: the rest of the group quantizes to (near)
    zero, as the reference says; other rows are unaffected."""
    x, weights, _, _ = mlp_inputs(5, 256, 256, 128, torch.bfloat16, seed=8)
    x[3, 17] = 1e4
    y = kernel.geglu_mlp_fp8(x, *weights)
    ref = ref64(x, weights, None, "tanh")
    assert_matches_ref(y, ref, torch.bfloat16, "huge value")
    assert torch.equal(y[[0, 1, 2, 4]], kernel.geglu_mlp_fp8(x[[0, 1, 2, 4]], *weights))


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")], ids=["inf", "-inf", "nan"])
def test_inf_or_nan_row_gives_a_nan_row(kernel, bad):
    """A group holding inf/NaN: that row's output is NaN (values unspecified beyond that);
    every other row is finite and as the reference."""
    x, weights, res, _ = mlp_inputs(4, 256, 256, 128, torch.float16, seed=9, residual=True)
    x[1, 200] = bad
    y = kernel.geglu_mlp_fp8(x, *weights, residual=res)
    assert y[1].isnan().all()
    keep = [0, 2, 3]
    assert_matches_ref(y[keep], ref64(x[keep], weights, res[keep], "tanh"), torch.float16, "other rows")


def test_empty_and_meta(kernel):
    x, weights, res, _ = mlp_inputs(0, 128, 128, 256, torch.bfloat16, residual=True)
    assert kernel.geglu_mlp_fp8(x, *weights, residual=res).shape == (0, 256)
    meta = [t.to("meta") for t in weights]
    xm = torch.empty(2, 3, 128, dtype=torch.bfloat16, device="meta")
    assert kernel.geglu_mlp_fp8(xm, *meta).shape == (2, 3, 256)
    # The native op's fake (registered where the build has the op) checks and gives shapes.
    fake = kernel.fp8_mlp._geglu_mlp_fp8_fake
    assert fake(xm, *meta, None, "none").shape == (2, 3, 256)
    with pytest.raises(ValueError, match="w_down_scale must have shape"):
        fake(xm, *meta[:5], meta[5][:1], None, "tanh")


# --------------------------------------------------------------------------- gradients


def test_inference_only(kernel):
    """x or residual needing a gradient raises, naming it; under no_grad / inference_mode
    it runs. Weights that require grad (FP8Linear's parameters do) are frozen: ignored,
    and the output carries no graph."""
    x, weights, res, _ = mlp_inputs(3, 128, 128, 128, torch.bfloat16, residual=True)
    with pytest.raises(ValueError, match=r"x requires grad: geglu_mlp_fp8 is inference-only"):
        kernel.geglu_mlp_fp8(x.clone().requires_grad_(), *weights)
    with pytest.raises(ValueError, match=r"residual requires grad: geglu_mlp_fp8 is inference-only"):
        kernel.geglu_mlp_fp8(x, *weights, residual=res.clone().requires_grad_())
    expected = kernel.geglu_mlp_fp8(x, *weights, residual=res)
    with torch.no_grad():
        assert torch.equal(kernel.geglu_mlp_fp8(x.clone().requires_grad_(), *weights, residual=res), expected)
    with torch.inference_mode():
        assert torch.equal(kernel.geglu_mlp_fp8(x, *weights, residual=res), expected)
    params = [nn.Parameter(t.clone()) for t in weights]
    assert all(p.requires_grad for p in params)
    y = kernel.geglu_mlp_fp8(x, *params, residual=res)
    assert not y.requires_grad and y.grad_fn is None
    assert torch.equal(y, expected)


# --------------------------------------------------------------------------- bad inputs


def setter(name, value_fn):
    """A bad case's mutation: argument `name` becomes value_fn(arguments)."""

    def mutate(a):
        a[name] = value_fn(a)

    return mutate


def _bad_cases():
    """(id, mutate(args dict) -> None, error type, message regex)."""
    bf16 = torch.bfloat16
    return [
        ("x float32", setter("x", lambda a: a["x"].float()), ValueError, r"x must have dtype float16/bfloat16, got torch.float32"),
        ("x not a tensor", setter("x", lambda a: a["x"].tolist()), TypeError, r"x must be a torch.Tensor, got list"),
        ("x sparse", setter("x", lambda a: a["x"].to_sparse()), ValueError, r"x must be a dense \(strided\) tensor"),
        (
            "x nested",
            setter("x", lambda a: torch.nested.nested_tensor([a["x"][:1], a["x"][1:]])),
            ValueError,
            r"x must be a dense \(strided\) tensor, got a nested tensor",
        ),
        ("x in 200", setter("x", lambda a: torch.zeros(3, 200, dtype=bf16)), ValueError, r"x: the last dimension \(in_features\) must be a multiple of 128 \(the FP8 MLP quantizes in 128-wide blocks\), got 200"),
        ("w_gate bf16", setter("w_gate", lambda a: a["w_gate"].to(bf16)), ValueError, r"w_gate must have dtype float8_e4m3fn, got torch.bfloat16"),
        ("w_gate e5m2", setter("w_gate", lambda a: a["w_gate"].to(torch.float8_e5m2)), ValueError, r"w_gate must have dtype float8_e4m3fn"),
        ("w_up bf16", setter("w_up", lambda a: a["w_up"].to(bf16)), ValueError, r"w_up must have dtype float8_e4m3fn"),
        ("w_down float32", setter("w_down", lambda a: a["w_down"].float()), ValueError, r"w_down must have dtype float8_e4m3fn"),
        ("w_gate in", setter("w_gate", lambda a: a["w_gate"][:, :128]), ValueError, r"w_gate must be a 2-d \[out_features, 256\] float8_e4m3fn weight"),
        ("w_gate 1-d", setter("w_gate", lambda a: a["w_gate"][0]), ValueError, r"w_gate must be a 2-d"),
        ("w_gate rows 200", setter("w_gate", lambda a: a["w_gate"][:200]), ValueError, r"w_gate: out_features \(dim 0\) must be a multiple of 128 \(the FP8 MLP quantizes in 128-wide blocks\), got 200"),
        ("w_up rows", setter("w_up", lambda a: a["w_up"][:128]), ValueError, r"w_up must have shape \(384, 256\), got \(128, 256\)"),
        ("w_down in", setter("w_down", lambda a: a["w_down"][:, :256]), ValueError, r"w_down must be a 2-d \[out_features, 384\]"),
        ("w_down rows 64", setter("w_down", lambda a: a["w_down"][:64]), ValueError, r"w_down: out_features \(dim 0\) must be a multiple of 128 \(the FP8 MLP quantizes in 128-wide blocks\), got 64"),
        ("w_gate_scale bf16", setter("w_gate_scale", lambda a: a["w_gate_scale"].to(bf16)), ValueError, r"w_gate_scale must have dtype float32, got torch.bfloat16"),
        ("w_up_scale float64", setter("w_up_scale", lambda a: a["w_up_scale"].double()), ValueError, r"w_up_scale must have dtype float32"),
        ("w_down_scale e8m0", setter("w_down_scale", lambda a: a["w_down_scale"].to(torch.float8_e8m0fnu)), ValueError, r"w_down_scale must have dtype float32"),
        ("w_gate_scale shape", setter("w_gate_scale", lambda a: a["w_gate_scale"][:2]), ValueError, r"w_gate_scale must have shape \(3, 2\) \(one float32 scale per 128x128 block of w_gate \(384, 256\)\), got \(2, 2\)"),
        ("w_up_scale transposed", setter("w_up_scale", lambda a: a["w_up_scale"].t()), ValueError, r"w_up_scale must have shape \(3, 2\)"),
        ("w_down_scale per-tensor", setter("w_down_scale", lambda a: torch.ones(())), ValueError, r"w_down_scale must have at least 1|w_down_scale must have shape"),
        ("w_down_scale not a tensor", setter("w_down_scale", lambda a: 1.0), TypeError, r"w_down_scale must be a torch.Tensor, got float"),
        ("residual shape", setter("residual", lambda a: torch.zeros(3, 256, dtype=bf16)), ValueError, r"residual must have shape \(3, 128\), got \(3, 256\)"),
        ("residual dtype", setter("residual", lambda a: torch.zeros(3, 128, dtype=torch.float16)), ValueError, r"residual must have dtype bfloat16, got torch.float16"),
        ("w_up on meta", setter("w_up", lambda a: a["w_up"].to("meta")), ValueError, r"w_up must be on the device of x \(cpu\), got meta"),
        ("w_gate_scale on meta", setter("w_gate_scale", lambda a: a["w_gate_scale"].to("meta")), ValueError, r"w_gate_scale must be on the device of x"),
        ("residual on meta", setter("residual", lambda a: torch.zeros(3, 128, dtype=bf16, device="meta")), ValueError, r"residual must be on the device of x"),
        ("approximate fast", setter("approximate", lambda a: "fast"), ValueError, r"approximate must be one of \('tanh', 'none'\), got 'fast'"),
        ("approximate bool", setter("approximate", lambda a: True), TypeError, r"approximate must be a str"),
    ]


BAD_CASES = _bad_cases()


def _good_args(device="cpu"):
    x, (qg, sg, qu, su, qd, sd), _, _ = mlp_inputs(3, 256, 384, 128, torch.bfloat16, device=device)
    return dict(x=x, w_gate=qg, w_gate_scale=sg, w_up=qu, w_up_scale=su, w_down=qd, w_down_scale=sd, residual=None, approximate="tanh")


def _with_device(mutate, device, stays=lambda v: v.is_nested):
    """The case's mutation, with the CPU-built tensors it makes moved to `device` (the
    meta-device cases keep their meta tensors; tensors for which `stays` holds stay on
    the CPU)."""

    def run(a):
        mutate(a)
        for name, v in a.items():
            if isinstance(v, torch.Tensor) and v.device.type == "cpu" and not stays(v):
                a[name] = v.to(device)

    return run


@pytest.mark.parametrize("case", BAD_CASES, ids=lambda c: c[0])
def test_bad_inputs_raise_named_errors(kernel, case):
    _, mutate, error, match = case
    args = _good_args()
    mutate(args)
    with pytest.raises(error, match=match):
        kernel.geglu_mlp_fp8(**args)


def test_good_args_run(kernel):
    assert kernel.geglu_mlp_fp8(**_good_args()).shape == (3, 128)


# --------------------------------------------------------------------------- torch.compile


@pytest.mark.parametrize("residual", [False, True], ids=["", "residual"])
def test_compile_fullgraph_cpu(kernel, residual):
    """No graph break; aot_eager runs the traced torch ops, so the values are eager's."""
    torch._dynamo.reset()
    x, weights, res, _ = mlp_inputs(7, 256, 384, 128, torch.bfloat16, seed=2, residual=residual)
    fn = torch.compile(
        lambda x, r: kernel.geglu_mlp_fp8(x, *weights, residual=r, approximate="none"), fullgraph=True, backend="aot_eager"
    )
    y = fn(x, res)
    assert torch.equal(y, kernel.geglu_mlp_fp8(x, *weights, residual=res, approximate="none"))
    assert_matches_ref(y, ref64(x, weights, res, "none"), torch.bfloat16, "compiled")


# --------------------------------------------------------------------------- GeGLUMLP over FP8Linear

HIDDEN, INTER = 256, 384


def _fp8_linear_cls():
    fp8 = pytest.importorskip("transformers.integrations.finegrained_fp8")
    return fp8.FP8Linear


def _cpu_fp8_linear(input, weight, weight_scale_inv, block_size=None, bias=None, activation_scale=None, allow_deepgemm=True):
    """What Transformers' fp8_linear computes (its Triton / DeepGEMM kernels are CUDA
    only and come from the Hub), in torch ops on any device: dynamic per-token 1x128
    activation groups (or a static per-tensor activation_scale), block (or per-tensor)
    weight scales, output in the input's dtype, + bias."""
    x2 = input.reshape(-1, input.shape[-1]).float()
    k = x2.shape[-1]
    if activation_scale is not None:
        xq = (x2 / activation_scale).clamp(-448, 448).to(FP8).float() * activation_scale
    else:
        pad = (-k) % 128
        g = F.pad(x2, (0, pad)).reshape(x2.shape[0], -1, 128)
        amax = g.abs().amax(-1, keepdim=True)
        s = torch.where(amax > 0, amax / 448, torch.ones_like(amax))
        xq = ((g / s).clamp(-448, 448).to(FP8).float() * s).reshape(x2.shape[0], -1)[:, :k]
    scale = weight_scale_inv.float()
    if block_size is None:
        w = weight.float() * scale
    else:
        n = weight.shape[0]
        full = scale.repeat_interleave(block_size[0], 0)[:n].repeat_interleave(block_size[1], 1)[:, :k]
        w = weight.float() * full
    y = (xq @ w.T).to(input.dtype)
    if bias is not None:
        y.add_(bias)  # in place, as Transformers' kernel adds it: the output keeps x's dtype
    return y.reshape(*input.shape[:-1], weight.shape[0])


@pytest.fixture
def cpu_fp8_linear(monkeypatch):
    """FP8Linear.forward runnable on CPU: its fp8_linear replaced by _cpu_fp8_linear
    (FP8Linear.forward and FP8LinearFunction look the name up at call time)."""
    fp8 = pytest.importorskip("transformers.integrations.finegrained_fp8")
    monkeypatch.setattr(fp8, "fp8_linear", _cpu_fp8_linear)
    return fp8


def fp8_projection(in_f, out_f, seed, *, block_size=(128, 128), activation_scheme="dynamic", scale_fmt="float", bias=False, device="cpu"):
    """A real Transformers FP8Linear holding quantized random weights."""
    cls = _fp8_linear_cls()
    m = cls(in_f, out_f, block_size=block_size, activation_scheme=activation_scheme, scale_fmt=scale_fmt, has_bias=bias)
    raw = rand((out_f, in_f), torch.bfloat16, seed, scale=in_f**-0.5)
    with torch.no_grad():
        if block_size is None:
            s = raw.float().abs().max() / 448
            m.weight.copy_((raw.float() / s).clamp(-448, 448).to(FP8))
            m.weight_scale_inv.copy_(s)
        elif tuple(block_size) == (128, 128) and in_f % 128 == 0 and out_f % 128 == 0:
            q, s = quantize_blocks(raw)
            m.weight.copy_(q)
            m.weight_scale_inv.copy_(s.to(m.weight_scale_inv.dtype))
        else:  # other blocks / ragged sizes: per-block amax with partial edge blocks
            bn, bk = block_size
            s = torch.empty(m.weight_scale_inv.shape)
            for i in range(s.shape[0]):
                for j in range(s.shape[1]):
                    s[i, j] = raw[i * bn : (i + 1) * bn, j * bk : (j + 1) * bk].float().abs().max() / 448
            full = s.repeat_interleave(bn, 0)[:out_f].repeat_interleave(bk, 1)[:, :in_f]
            m.weight.copy_((raw.float() / full).clamp(-448, 448).to(FP8))
            m.weight_scale_inv.copy_(s.to(m.weight_scale_inv.dtype))
        if activation_scheme == "static":
            m.activation_scale.fill_(0.02)
        if bias:
            m.bias = nn.Parameter(torch.randn(out_f, dtype=torch.bfloat16) * 0.5)
    return m.to(device)


def fp8_gemma_mlp(hidden_act="gelu_pytorch_tanh", device="cpu", hidden=HIDDEN, inter=INTER, **proj):
    from transformers import GemmaConfig
    from transformers.activations import ACT2FN
    from transformers.models.gemma.modeling_gemma import GemmaMLP

    mlp = GemmaMLP(GemmaConfig(hidden_size=hidden, intermediate_size=inter))
    mlp.act_fn = ACT2FN[hidden_act]
    mlp.gate_proj = fp8_projection(hidden, inter, 1, device=device, **proj)
    mlp.up_proj = fp8_projection(hidden, inter, 2, device=device, **proj)
    mlp.down_proj = fp8_projection(inter, hidden, 3, device=device, **proj)
    return mlp


def layer_weights(mlp):
    return tuple(t for p in (mlp.gate_proj, mlp.up_proj, mlp.down_proj) for t in (p.weight, p.weight_scale_inv))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("hidden_act,approximate", [("gelu_pytorch_tanh", "tanh"), ("gelu", "none")])
def test_layer_runs_fp8_mlp_on_fp8_linear(kernel, monkeypatch, cpu_fp8_linear, dtype, hidden_act, approximate):
    """GeGLUMLP bound to a Gemma MLP of FP8Linear projections: one geglu_mlp_fp8 call on
    the modules' own tensors, matching the float64 reference; and within bf16 rounding of
    what the module itself computes (FP8Linear rounds gate, up and h to x's dtype)."""
    calls = spy(monkeypatch, kernel.fp8_mlp, "geglu_mlp_fp8")
    mlp = fp8_gemma_mlp(hidden_act)
    x = rand((2, 9, HIDDEN), dtype, seed=4)
    out = kernel.layers.GeGLUMLP.forward(mlp, x)
    assert len(calls) == 1 and calls[0]["approximate"] == approximate
    seen = [calls[0][n] for n in ("w_gate", "w_gate_scale", "w_up", "w_up_scale", "w_down", "w_down_scale")]
    assert all(a is b for a, b in zip(seen, layer_weights(mlp)))  # in place: no copies
    assert_matches_ref(out, ref64(x, layer_weights(mlp), None, approximate), dtype, "layer")
    assert rel_rms(out, mlp(x)) < 2e-2


def test_layer_fp8_route_with_frozen_parameters_in_grad_mode(kernel, monkeypatch, cpu_fp8_linear):
    """FP8Linear's parameters require grad as constructed; an x without grad still takes
    the FP8 route in grad mode (the weights are frozen)."""
    calls = spy(monkeypatch, kernel.fp8_mlp, "geglu_mlp_fp8")
    mlp = fp8_gemma_mlp()
    assert mlp.gate_proj.weight.requires_grad
    x = rand((5, HIDDEN), torch.bfloat16, seed=6)
    out = kernel.layers.GeGLUMLP.forward(mlp, x)
    assert len(calls) == 1 and not out.requires_grad


def test_layer_fp8_compiles_fullgraph(kernel, cpu_fp8_linear):
    torch._dynamo.reset()
    mlp = fp8_gemma_mlp()
    x = rand((7, HIDDEN), torch.bfloat16, seed=5)
    fn = torch.compile(lambda x: kernel.layers.GeGLUMLP.forward(mlp, x), fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        assert torch.equal(fn(x), kernel.layers.GeGLUMLP.forward(mlp, x))


def _hook(module, args, out):
    return out * 2.0


# (id, mlp keyword arguments, change applied to the built module, dtype, needs grad)
FALLBACKS = [
    ("per-tensor scales", dict(block_size=None), None, torch.bfloat16, False),
    ("static activations", dict(activation_scheme="static"), None, torch.bfloat16, False),
    ("ue8m0 scales", dict(scale_fmt="ue8m0"), None, torch.bfloat16, False),
    ("bias", dict(bias=True), None, torch.bfloat16, False),
    ("block 64x64", dict(block_size=(64, 64)), None, torch.bfloat16, False),
    ("block list [128, 64]", dict(block_size=[128, 64]), None, torch.bfloat16, False),
    ("ragged sizes", dict(hidden=192), None, torch.bfloat16, False),
    ("x float32", {}, None, torch.float32, False),
    ("x needs grad", {}, None, torch.bfloat16, True),
    ("forward hook", {}, lambda m: m.up_proj.register_forward_hook(_hook), torch.bfloat16, False),
    ("instance forward", {}, lambda m: setattr(m.down_proj, "forward", lambda h: m.down_proj.__class__.forward(m.down_proj, h) * 3), torch.bfloat16, False),
    ("dequantized weight", {}, lambda m: setattr(m.up_proj, "weight", nn.Parameter(m.up_proj.weight.to(torch.bfloat16))), torch.bfloat16, False),
    ("plain down_proj", {}, lambda m: setattr(m, "down_proj", nn.Linear(INTER, HIDDEN, bias=False, dtype=torch.bfloat16)), torch.bfloat16, False),
    ("silu", dict(hidden_act="silu"), None, torch.bfloat16, False),
]


@pytest.mark.parametrize("case", FALLBACKS, ids=lambda c: c[0])
def test_layer_unsupported_fp8_configurations_run_the_module(kernel, monkeypatch, cpu_fp8_linear, case):
    """Every configuration geglu_mlp_fp8 does not compute exactly: the module's own
    forward runs (same bits as calling it), and the FP8 MLP is not called."""
    _, kwargs, change, dtype, grad = case
    kwargs = dict(kwargs)
    hidden = kwargs.pop("hidden", HIDDEN)
    mlp = fp8_gemma_mlp(hidden=hidden, **kwargs)
    if change is not None:
        change(mlp)
    calls = spy(monkeypatch, kernel.fp8_mlp, "geglu_mlp_fp8")
    x = rand((2, 5, hidden), dtype, seed=3)
    if grad:
        x.requires_grad_()
    out = kernel.layers.GeGLUMLP.forward(mlp, x)
    assert calls == []
    assert torch.equal(out, mlp(x))
    if grad:
        out.float().sum().backward()
        assert x.grad is not None and x.grad.isfinite().all()


def test_layer_under_autocast_runs_the_module(kernel, monkeypatch, cpu_fp8_linear):
    calls = spy(monkeypatch, kernel.fp8_mlp, "geglu_mlp_fp8")
    mlp = fp8_gemma_mlp()
    x = rand((3, HIDDEN), torch.bfloat16, seed=2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = kernel.layers.GeGLUMLP.forward(mlp, x)
        ref = mlp(x)
    assert calls == [] and torch.equal(out, ref)


def test_ue8m0_is_power_of_two_float_scales(kernel):
    """What scale_fmt="ue8m0" means in the installed Transformers: the same w * scale
    dequantization with each block scale a power of two, stored as float8_e8m0fnu.
    Converted to float32 those scales give geglu_mlp_fp8 the same function (the layer
    falls back only because it reads float32 scales in place, without a copy)."""
    mlp = fp8_gemma_mlp(scale_fmt="ue8m0")
    assert mlp.gate_proj.weight_scale_inv.dtype == torch.float8_e8m0fnu
    w = [t if t.dtype == FP8 else t.float() for t in layer_weights(mlp)]
    x = rand((4, HIDDEN), torch.bfloat16, seed=1)
    assert_matches_ref(kernel.geglu_mlp_fp8(x, *w), ref64(x, w, None, "tanh"), torch.bfloat16, "ue8m0 as float32")


# --------------------------------------------------------------------------- CUDA

cuda = pytest.mark.cuda

# (M values, (in, hidden, out)): the big shapes at small M only. At 1-16 tokens the
# decode kernels run (8-token wgmmas up to 8, 16-token ones above; the down projection's
# K split unevenly where its 128-blocks do not divide), the GEMMs from 17 on (the down
# projection in clusters of two from 2048 output columns on).
CUDA_GRID = [
    ([1, 4, 5, 7, 16, 17, 64, 129, 1000, 4096], (128, 128, 128)),
    ([1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 64, 129, 1000, 4096], (768, 3072, 768)),
    ([1, 3, 12], (384, 640, 384)),
    ([129, 1000], (256, 512, 2176)),  # the down projection in clusters of two: 17 tiles, one cluster half out
    ([1, 7, 16], (2048, 16384, 2048)),
    ([1, 16], (3072, 24576, 3072)),
]
CUDA_CASES = [(m, shape) for ms, shape in CUDA_GRID for m in ms]
# The fused kernels' bound. Hopper's FP8 wgmma accumulates each 128-deep block at
# reduced precision (about 1e-4 relative), so about 1% of h's bytes land one e4m3 step
# (6-12%) from the float64 reference's, which moves outputs by up to a few percent of a
# row (measured on an H100: 0.35% overall, at most 3.4% of a row's norm): far below the
# quantization error itself (about 6.4% against the unquantized MLP). Overall relative
# RMS <= 1e-2, each row's <= 8e-2, each element within 0.15 of its row's largest; and,
# given the unquantized result, the accuracy target: within 2x of the
# reference's own error, and off the reference by under a quarter of it.
KERNEL_REL_RMS, KERNEL_ROW_REL_RMS, KERNEL_ROW_ATOL = 1e-2, 8e-2, 0.15


def assert_kernel_matches_ref(out, ref, true=None, what=""):
    """The fused kernels' bound (above)."""
    assert out.shape == ref.shape, (what, out.shape, ref.shape)
    assert out.isfinite().all(), f"{what}: non-finite elements (unwritten or overflowed)"
    o, r = out.double().reshape(-1, ref.shape[-1]), ref.reshape(-1, ref.shape[-1])
    err = o - r
    assert rel_rms(o, r) <= KERNEL_REL_RMS, (what, rel_rms(o, r))
    row_norm = r.norm(dim=-1).clamp_min(1e-30)
    assert (err.norm(dim=-1) / row_norm).max().item() <= KERNEL_ROW_REL_RMS, what
    assert (err.abs().amax(-1) <= KERNEL_ROW_ATOL * r.abs().amax(-1) + 1e-30).all(), what
    if true is not None:
        # Plus the output's own rounding (unit roundoff of its dtype), which the float64
        # quantization error does not hold: with a residual much larger than the MLP's
        # output, that error is below bf16's rounding of the sum.
        quantization, rounding = rel_rms(ref, true), torch.finfo(out.dtype).eps / 2
        assert rel_rms(out, true) <= 2 * quantization + rounding, what
        assert rel_rms(out, ref) < 0.25 * quantization + rounding, what


def assert_same_up_to_accumulation_order(a, b):
    """Two runs of the same kernels: equal, but for a split-K reduction whose float32
    order may vary between launches, which moves an output by at most one ulp of its
    dtype (or by a quantization step of h that such a difference tips over)."""
    assert a.shape == b.shape and a.dtype == b.dtype and a.isfinite().all()
    if not torch.equal(a, b):
        assert_kernel_matches_ref(a, b.double(), what="same kernels")


@pytest.fixture
def native(kernel):
    """The native op, where the fused kernels serve this GPU; else a visible skip."""
    if not HAS_CUDA:
        pytest.skip("needs a CUDA GPU")
    op = getattr(kernel._ops.ops, "_geglu_mlp_fp8", None)
    if op is None:
        pytest.skip("this build has no _geglu_mlp_fp8 op (noarch / CPU variant)")
    if not kernel._ops.ops._geglu_mlp_fp8_serves(torch.empty(0, device="cuda")):
        cc = "".join(map(str, torch.cuda.get_device_capability()))
        pytest.skip(f"the build has no FP8 kernels for this GPU (sm_{cc}; they are sm_90's)")
    return op


def poison_allocator(numel: int, device="cuda"):
    """Fill free caching-allocator memory with NaN, so a fresh output that the kernel
    fails to write in full shows NaN (the allocator hands the freed block back)."""
    t = torch.full((numel,), float("nan"), device=device, dtype=torch.float32)
    del t


@cuda
@pytest.mark.parametrize("residual", [False, True], ids=["", "residual"])
@pytest.mark.parametrize("case", CUDA_CASES, ids=lambda c: f"M{c[0]}-" + "x".join(map(str, c[1])))
def test_native_grid(kernel, native, monkeypatch, case, residual):
    """The public function on an sm_90 GPU runs the native op (the composite is patched
    to fail) and matches the float64 reference on the grid."""
    m, (k, hidden, n_out) = case
    x, weights, res, raw = mlp_inputs(m, k, hidden, n_out, torch.bfloat16, seed=m, device="cuda", residual=residual)

    def no_composite(*args):
        raise AssertionError("the composite ran where the native op should")

    monkeypatch.setattr(kernel.fp8_mlp, "_composed_mlp_fp8", no_composite)
    poison_allocator(4 * m * n_out + (1 << 20))
    y = kernel.geglu_mlp_fp8(x, *weights, residual=res)
    assert y.dtype == torch.bfloat16
    true = unquantized64(x, raw, res, "tanh") if m <= 129 else None
    assert_kernel_matches_ref(y, ref64(x, weights, res, "tanh"), true, f"M={m}")


@cuda
@pytest.mark.parametrize("m", [1, 16])
def test_native_decode_gate_up_weights_over_2_31_elements_large(kernel, native, m):
    """The decode kernels on gate / up weights of > 2^31 elements each (131200 x 16384):
    the rows past element 2^31 (the last 128 hidden units) weighted 30x in the down
    projection, so an offset that wrapped would show in every output."""
    k, hidden, n_out = 16384, (1 << 17) + 128, 256
    gen = torch.Generator(device="cuda").manual_seed(7)

    def e4m3(rows, cols):  # random finite e4m3 bytes (0x7f / 0xff are NaN)
        q = torch.randint(0, 0x7F, (rows, cols), device="cuda", dtype=torch.uint8, generator=gen)
        sign = torch.randint(0, 2, (rows, cols), device="cuda", dtype=torch.uint8, generator=gen) << 7
        return (q | sign).view(FP8)

    def scales(rows, cols, fan_in):
        return torch.rand((rows // 128, cols // 128), device="cuda", generator=gen).add_(0.5).mul_(fan_in**-0.5 / 200)

    qg, qu, qd = e4m3(hidden, k), e4m3(hidden, k), e4m3(n_out, hidden)
    sg, su, sd = scales(hidden, k, k), scales(hidden, k, k), scales(n_out, hidden, hidden)
    sd[:, -1] *= 30
    x = rand((m, k), torch.bfloat16, 8, device="cuda")
    y = kernel.geglu_mlp_fp8(x, qg, sg, qu, su, qd, sd)
    # The float64 reference, gate / up by chunks of rows.
    xq = quantize_rows_ref(x)
    h = torch.cat([F.gelu(xq @ dequantize_ref(qg[r : r + 8192], sg[r // 128 : (r + 8192) // 128]).T, approximate="tanh")
                   * (xq @ dequantize_ref(qu[r : r + 8192], su[r // 128 : (r + 8192) // 128]).T)
                   for r in range(0, hidden, 8192)], dim=1)
    ref = quantize_rows_ref(h) @ dequantize_ref(qd, sd).T
    del qg, qu
    assert_kernel_matches_ref(y, ref, None, f"M={m}, {hidden} x {k} gate / up weights")


@cuda
@pytest.mark.parametrize("k", [768, 1024])
@pytest.mark.parametrize("lead", [(3, 43), (1, 5), (2, 6)], ids=lambda l: f"M{l[0] * l[1]}")
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("approximate", APPROX)
def test_native_dtypes_approximations_and_leading_dims(native, dtype, approximate, lead, k):
    """129 rows (the GEMMs), 5 and 12 (the decode kernels' 8- and 16-token forms; the
    gate/up quantizes x of either dtype itself, at K = 1024 past its ring's 6 stages)."""
    x, weights, res, _ = mlp_inputs(0, k, 3072, 768, dtype, seed=5, device="cuda", residual=True, lead=lead)
    y = native.default(x, *weights, res, approximate)
    assert y.shape == (*lead, 768) and y.dtype == dtype
    assert_kernel_matches_ref(y, ref64(x, weights, res, approximate), what=f"{dtype} {approximate}")


@cuda
@pytest.mark.parametrize("m", [3, 100])
def test_native_misaligned_x_and_residual(kernel, native, m):
    """x and the residual as views whose data is not 16-byte aligned: geglu_mlp_fp8
    copies them, and the result is the aligned tensors' (up to accumulation order); the
    op itself names a misaligned x."""
    x, weights, res, _ = mlp_inputs(m, 256, 512, 256, torch.bfloat16, seed=9, device="cuda", residual=True)
    expected = kernel.geglu_mlp_fp8(x, *weights, residual=res)
    xm = torch.empty(m * 256 + 3, dtype=x.dtype, device="cuda")[3:].view(m, 256)
    xm.copy_(x)
    rm = torch.empty(m * 256 + 1, dtype=res.dtype, device="cuda")[1:].view(m, 256)
    rm.copy_(res)
    assert xm.data_ptr() % 16 and rm.data_ptr() % 16
    assert_same_up_to_accumulation_order(kernel.geglu_mlp_fp8(xm, *weights, residual=rm), expected)
    with pytest.raises(ValueError, match=r"^x must be 16-byte aligned"):
        native.default(xm, *weights, None, "tanh")


@cuda
def test_native_zero_huge_inf_nan_rows(native):
    x, weights, res, _ = mlp_inputs(8, 768, 3072, 768, torch.bfloat16, seed=6, device="cuda", residual=True)
    x[1] = 0
    x[2, 300:428] = 0
    x[3, 5] = 1e4
    x[5, 700] = float("inf")
    x[6, 10] = float("nan")
    y = native.default(x, *weights, res, "tanh")
    assert y[5].isnan().all() and y[6].isnan().all()
    keep = [0, 1, 2, 3, 4, 7]
    assert_kernel_matches_ref(y[keep], ref64(x[keep], weights, res[keep], "tanh"), what="edge rows")
    assert torch.equal(y[1], res[1])


@cuda
@pytest.mark.parametrize("case", BAD_CASES, ids=lambda c: c[0])
def test_native_bad_inputs_raise_named_errors(kernel, native, case):
    """The same error types on CUDA tensors, each message naming the argument first: the
    op's own checks (which should say what the Python checks say), or the Python checks
    where the dispatcher refused the call before the op ran."""
    _, mutate, error, match = case
    args = _good_args("cuda")
    _with_device(mutate, "cuda")(args)
    name = re.match(r"\w+", match).group(0)
    with pytest.raises(error, match=rf"^{name}\b"):
        kernel.geglu_mlp_fp8(**args)


@cuda
def test_native_devices_differ(kernel, native):
    args = _good_args("cuda")
    args["w_down_scale"] = args["w_down_scale"].cpu()
    with pytest.raises(ValueError, match=r"^w_down_scale\b.*device"):
        kernel.geglu_mlp_fp8(**args)


@cuda
@pytest.mark.parametrize("residual", [False, True], ids=["", "residual"])
def test_native_opcheck(native, residual):
    x, weights, res, _ = mlp_inputs(7, 256, 384, 128, torch.bfloat16, device="cuda", residual=residual)
    # Not test_schema: its alias check multiplies the inputs, and torch has no float8 mul.
    utils = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
    torch.library.opcheck(native.default, (x, *weights, res, "tanh"), test_utils=utils)
    x3 = x.reshape(7, 1, 256)
    args = (x3, *weights, None if res is None else res.reshape(7, 1, 128), "none")
    torch.library.opcheck(native.default, args, test_utils=utils)


@cuda
def test_native_compile_fullgraph(kernel, native):
    torch._dynamo.reset()
    x, weights, res, _ = mlp_inputs(16, 768, 3072, 768, torch.bfloat16, device="cuda", residual=True)
    fn = torch.compile(lambda x, r: kernel.geglu_mlp_fp8(x, *weights, residual=r), fullgraph=True)
    y = fn(x, res)
    assert_same_up_to_accumulation_order(y, kernel.geglu_mlp_fp8(x, *weights, residual=res))
    x2 = rand((40, 768), torch.bfloat16, seed=9, device="cuda")  # another M: dynamic shapes
    r2 = rand((40, 768), torch.bfloat16, seed=10, device="cuda")
    assert_kernel_matches_ref(fn(x2, r2), ref64(x2, weights, r2, "tanh"), what="compiled, new M")


@cuda
@pytest.mark.parametrize("m", [16, 64])  # the decode kernels, the GEMMs (stream-K down)
def test_native_cuda_graph_capture_and_replay(kernel, native, m):
    x, weights, res, _ = mlp_inputs(m, 768, 3072, 768, torch.bfloat16, device="cuda", residual=True)
    static_x, static_res = x.clone(), res.clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):  # warm up outside the capture (first-call setup, autotuning)
            kernel.geglu_mlp_fp8(static_x, *weights, residual=static_res)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = kernel.geglu_mlp_fp8(static_x, *weights, residual=static_res)
    for seed in (1, 2):
        new_x = rand((m, 768), torch.bfloat16, seed=seed, device="cuda")
        static_x.copy_(new_x)
        static_y.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert_same_up_to_accumulation_order(static_y, kernel.geglu_mlp_fp8(new_x, *weights, residual=static_res))


@cuda
@pytest.mark.parametrize("m", [1, 129])
def test_functional_api_on_any_gpu(kernel, m):
    """Whatever the GPU and build (sm_90 native op, or the composite elsewhere): the
    function matches the reference; the composite itself runs on CUDA too."""
    x, weights, res, raw = mlp_inputs(m, 768, 3072, 768, torch.bfloat16, seed=m, device="cuda", residual=True)
    y = kernel.geglu_mlp_fp8(x, *weights, residual=res)
    ref = ref64(x, weights, res, "tanh")
    assert_kernel_matches_ref(y, ref, unquantized64(x, raw, res, "tanh"), "public")
    composed = kernel.fp8_mlp._composed_mlp_fp8(x, *weights, res, "tanh")
    assert_kernel_matches_ref(composed, ref, what="composite on CUDA")


@cuda
def test_layer_on_cuda(kernel, monkeypatch):
    """GeGLUMLP over FP8Linear on CUDA: the FP8 MLP, against the float64 reference, where
    the native FP8 kernels serve the GPU (elsewhere the layer keeps FP8Linear's forward)."""
    pytest.importorskip("transformers.integrations.finegrained_fp8")
    if not kernel.fp8_mlp._native_fp8_x(torch.empty(0, device="cuda")):
        pytest.skip("no FP8 kernels for this GPU in this build: the layer keeps FP8Linear's own forward")
    calls = spy(monkeypatch, kernel.fp8_mlp, "geglu_mlp_fp8")
    mlp = fp8_gemma_mlp(device="cuda")
    x = rand((2, 9, HIDDEN), torch.bfloat16, seed=4, device="cuda")
    out = kernel.layers.GeGLUMLP.forward(mlp, x)
    assert len(calls) == 1
    assert_kernel_matches_ref(out, ref64(x, layer_weights(mlp), None, "tanh"), what="layer")
