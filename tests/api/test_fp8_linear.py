"""fp8_linear (fp8_gemm.py) and the FP8Linear layer over Transformers' FP8Linear,
against a float64 reference written here.

The reference is test_fp8_mlp.py's: x quantized by the documented 1x128 rule, the
weight dequantized in float64, the GEMM in float64, + c with c = bias.to(x.dtype) +
residual in x's dtype. The composite (CPU) within one ulp of the output dtype plus
float32 GEMM noise; the fused kernels (CUDA, sm_90) within test_fp8_mlp's kernel bound,
and, given the unquantized product, within 2x the reference's own quantization error.
"""

import pytest
import torch
import torch.nn as nn

from conftest import HAS_CUDA, spy
from test_fp8_mlp import (  # noqa: F401  (cpu_fp8_linear is a fixture)
    FP8,
    assert_kernel_matches_ref,
    assert_matches_ref,
    assert_same_up_to_accumulation_order,
    cpu_fp8_linear,
    dequantize_ref,
    fp8_projection,
    fp8_weight,
    poison_allocator,
    quantize_rows_ref,
    _with_device,
    rand,
    setter,
)

DTYPES = [torch.bfloat16, torch.float16]
cuda = pytest.mark.cuda


def linear_inputs(m, k, n, dtype, seed=0, device="cpu", bias=None, residual=False, lead=None):
    """x [m, k] (or [*lead, k]), the FP8 weight and its scales, bias (None, or of dtype
    `bias`), residual or None, and the unquantized bf16 weight."""
    shape = (*lead, k) if lead else (m, k)
    x = rand(shape, dtype, seed, device)
    w, q, s = fp8_weight(n, k, seed + 1, device)
    b = rand((n,), bias, seed + 2, device, scale=0.5) if bias is not None else None
    r = rand((*shape[:-1], n), dtype, seed + 3, device) if residual else None
    return x, q, s, b, r, w


def ref64(x, q, s, bias=None, residual=None):
    x2 = x.reshape(-1, x.shape[-1])
    y = quantize_rows_ref(x2) @ dequantize_ref(q, s).T
    c = residual
    if bias is not None:
        b = bias.to(x.dtype)
        c = b.expand(*x.shape[:-1], q.shape[0]) if residual is None else residual + b
    if c is not None:
        y = y + c.reshape(y.shape).double()
    return y.reshape(*x.shape[:-1], q.shape[0])


def unquantized64(x, w, bias=None, residual=None):
    y = x.double() @ w.double().T
    if bias is not None:
        y = y + bias.double()
    return y if residual is None else y + residual.double()


# --------------------------------------------------------------------------- the composite (CPU)

SHAPES = [(128, 128), (256, 384), (384, 128)]


@pytest.mark.parametrize("extras", ["", "bias", "bias32", "residual", "bias+residual"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("m", [1, 7, 129])
def test_composite_matches_float64_reference(kernel, m, shape, dtype, extras):
    k, n = shape
    bias = None if "bias" not in extras else (torch.float32 if "32" in extras else dtype)
    x, q, s, b, r, _ = linear_inputs(m, k, n, dtype, seed=m, bias=bias, residual="residual" in extras)
    y = kernel.fp8_linear(x, q, s, bias=b, residual=r)
    assert_matches_ref(y, ref64(x, q, s, b, r), dtype, extras)


def test_composite_leading_dims_and_strided_operands(kernel):
    x, q, s, b, r, _ = linear_inputs(0, 256, 384, torch.bfloat16, bias=torch.bfloat16, residual=True, lead=(2, 3))
    y = kernel.fp8_linear(x, q, s, b, r)
    assert y.shape == (2, 3, 384)
    assert_matches_ref(y, ref64(x, q, s, b, r), torch.bfloat16, "3-d")
    xt = x.reshape(6, 256).t().contiguous().t()  # a transposed view of the same values
    assert torch.equal(kernel.fp8_linear(xt, q, s, b, r.reshape(6, 384)), y.reshape(6, 384))


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")], ids=["inf", "-inf", "nan"])
def test_inf_or_nan_row_gives_a_nan_row(kernel, bad):
    x, q, s, _, r, _ = linear_inputs(4, 256, 128, torch.bfloat16, residual=True)
    x[1] = 0
    x[2, 17] = bad
    y = kernel.fp8_linear(x, q, s, residual=r)
    assert y[2].isnan().all()
    keep = [0, 1, 3]
    assert_matches_ref(y[keep], ref64(x[keep], q, s, None, r[keep]), torch.bfloat16, "other rows")
    assert torch.equal(y[1], r[1])  # a zero row: the residual exactly


def test_empty_and_meta(kernel):
    x, q, s, _, _, _ = linear_inputs(0, 256, 128, torch.bfloat16, lead=(0,))
    assert kernel.fp8_linear(x, q, s).shape == (0, 128)
    y = kernel.fp8_linear(torch.empty(5, 256, dtype=torch.bfloat16, device="meta"), q.to("meta"), s.to("meta"))
    assert y.shape == (5, 128) and y.device.type == "meta"


def test_inference_only(kernel):
    """x or residual needing a gradient raises, naming it; the weight, scales and bias
    are frozen (FP8Linear gives them no gradient): their requires_grad is ignored."""
    x, q, s, b, r, _ = linear_inputs(3, 128, 128, torch.bfloat16, bias=torch.bfloat16, residual=True)
    with pytest.raises(ValueError, match=r"^x requires grad: fp8_linear is inference-only"):
        kernel.fp8_linear(x.clone().requires_grad_(), q, s)
    with pytest.raises(ValueError, match=r"^residual requires grad: fp8_linear is inference-only"):
        kernel.fp8_linear(x, q, s, residual=r.clone().requires_grad_())
    expected = kernel.fp8_linear(x, q, s, b, r)
    with torch.no_grad():
        assert torch.equal(kernel.fp8_linear(x.clone().requires_grad_(), q, s, b, r), expected)
    y = kernel.fp8_linear(x, nn.Parameter(q.clone()), nn.Parameter(s.clone()), nn.Parameter(b.clone()), r)
    assert not y.requires_grad and torch.equal(y, expected)


def _bad_cases():
    bf16 = torch.bfloat16
    return [
        ("x float32", setter("x", lambda a: a["x"].float()), ValueError, r"^x must have dtype float16/bfloat16, got torch.float32"),
        ("x not a tensor", setter("x", lambda a: a["x"].tolist()), TypeError, r"^x must be a torch.Tensor, got list"),
        ("x sparse", setter("x", lambda a: a["x"].to_sparse()), ValueError, r"^x must be a dense \(strided\) tensor"),
        ("x in 200", setter("x", lambda a: torch.zeros(3, 200, dtype=bf16)), ValueError, r"^x: the last dimension \(in_features\) must be a multiple of 128"),
        ("weight bf16", setter("weight", lambda a: a["weight"].to(bf16)), ValueError, r"^weight must have dtype float8_e4m3fn, got torch.bfloat16"),
        ("weight e5m2", setter("weight", lambda a: a["weight"].to(torch.float8_e5m2)), ValueError, r"^weight must have dtype float8_e4m3fn"),
        ("weight in", setter("weight", lambda a: a["weight"][:, :128]), ValueError, r"^weight must be a 2-d \[out_features, 256\] float8_e4m3fn weight"),
        ("weight 1-d", setter("weight", lambda a: a["weight"][0]), ValueError, r"^weight must be a 2-d"),
        ("weight rows 200", setter("weight", lambda a: a["weight"][:200]), ValueError, r"^weight: out_features \(dim 0\) must be a multiple of 128"),
        ("scale bf16", setter("weight_scale_inv", lambda a: a["weight_scale_inv"].to(bf16)), ValueError, r"^weight_scale_inv must have dtype float32, got torch.bfloat16"),
        ("scale e8m0", setter("weight_scale_inv", lambda a: a["weight_scale_inv"].to(torch.float8_e8m0fnu)), ValueError, r"^weight_scale_inv must have dtype float32"),
        ("scale shape", setter("weight_scale_inv", lambda a: a["weight_scale_inv"][:2]), ValueError, r"^weight_scale_inv must have shape \(3, 2\) \(one float32 scale per 128x128 block of weight \(384, 256\)\), got \(2, 2\)"),
        ("scale per-tensor", setter("weight_scale_inv", lambda a: torch.ones(())), ValueError, r"^weight_scale_inv must have"),
        ("scale not a tensor", setter("weight_scale_inv", lambda a: 1.0), TypeError, r"^weight_scale_inv must be a torch.Tensor, got float"),
        ("bias shape", setter("bias", lambda a: torch.zeros(128, dtype=bf16)), ValueError, r"^bias must have shape \(384,\), got \(128,\)"),
        ("bias dtype", setter("bias", lambda a: torch.zeros(384, dtype=torch.float64)), ValueError, r"^bias must have dtype"),
        ("residual shape", setter("residual", lambda a: torch.zeros(3, 256, dtype=bf16)), ValueError, r"^residual must have shape \(3, 384\), got \(3, 256\)"),
        ("residual dtype", setter("residual", lambda a: torch.zeros(3, 384, dtype=torch.float16)), ValueError, r"^residual must have dtype bfloat16, got torch.float16"),
        ("weight on meta", setter("weight", lambda a: a["weight"].to("meta")), ValueError, r"^weight must be on the device of x \((cpu|cuda:\d+)\), got meta"),
        ("bias on meta", setter("bias", lambda a: torch.zeros(384, dtype=bf16, device="meta")), ValueError, r"^bias must be on the device of x"),
    ]


BAD_CASES = _bad_cases()


def _good_args(device="cpu"):
    x, q, s, _, _, _ = linear_inputs(3, 256, 384, torch.bfloat16, device=device)
    return dict(x=x, weight=q, weight_scale_inv=s, bias=None, residual=None)


@pytest.mark.parametrize("case", BAD_CASES, ids=lambda c: c[0])
def test_bad_inputs_raise_named_errors(kernel, case):
    _, mutate, error, match = case
    args = _good_args()
    mutate(args)
    with pytest.raises(error, match=match):
        kernel.fp8_linear(**args)


@pytest.mark.parametrize("extras", ["", "bias", "residual"])
def test_compile_fullgraph_cpu(kernel, extras):
    torch._dynamo.reset()
    x, q, s, b, r, _ = linear_inputs(7, 256, 384, torch.bfloat16, seed=2, bias=torch.bfloat16 if extras == "bias" else None, residual=extras == "residual")
    fn = torch.compile(lambda x, r: kernel.fp8_linear(x, q, s, b, r), fullgraph=True, backend="aot_eager")
    y = fn(x, r)
    assert torch.equal(y, kernel.fp8_linear(x, q, s, b, r))
    assert_matches_ref(y, ref64(x, q, s, b, r), torch.bfloat16, "compiled")


# --------------------------------------------------------------------------- the FP8Linear layer

IN, OUT = 256, 384


@pytest.mark.parametrize("bias", [False, True], ids=["", "bias"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
def test_layer_runs_fp8_linear(kernel, monkeypatch, cpu_fp8_linear, dtype, bias):
    proj = fp8_projection(IN, OUT, 1, bias=bias)
    calls = spy(monkeypatch, kernel.fp8_gemm, "fp8_linear")
    x = rand((2, 5, IN), dtype, seed=3)
    with torch.no_grad():
        y = kernel.layers.FP8Linear.forward(proj, x)
    assert len(calls) == 1 and calls[0]["weight"] is proj.weight and calls[0]["weight_scale_inv"] is proj.weight_scale_inv
    assert y.shape == (2, 5, OUT) and y.dtype == dtype
    assert_matches_ref(y, ref64(x, proj.weight, proj.weight_scale_inv, proj.bias), dtype, "layer")
    # Transformers' own route rounds before its bias: within one ulp of ours.
    torch.testing.assert_close(y, proj(x), rtol=2**-7, atol=2e-2)


def _hook(module, args, out):
    return out * 2.0


# (id, projection keyword arguments, change applied to the module, x dtype, needs grad)
FALLBACKS = [
    ("per-tensor scales", dict(block_size=None), None, torch.bfloat16, False),
    ("static activations", dict(activation_scheme="static"), None, torch.bfloat16, False),
    ("ue8m0 scales", dict(scale_fmt="ue8m0"), None, torch.bfloat16, False),
    ("block 64x64", dict(block_size=(64, 64)), None, torch.bfloat16, False),
    ("block list [128, 64]", dict(block_size=[128, 64]), None, torch.bfloat16, False),
    ("ragged out 192", dict(out_f=192), None, torch.bfloat16, False),
    ("x float32", {}, None, torch.float32, False),
    ("x needs grad", {}, None, torch.bfloat16, True),
    ("dequantized weight", {}, lambda m: setattr(m, "weight", nn.Parameter(m.weight.to(torch.bfloat16))), torch.bfloat16, False),
]


@pytest.mark.parametrize("case", FALLBACKS, ids=lambda c: c[0])
def test_layer_unsupported_configurations_run_the_module(kernel, monkeypatch, cpu_fp8_linear, case):
    """Every configuration fp8_linear does not compute exactly: the module's own forward
    runs (the same bits as calling the module), and fp8_linear is not called."""
    _, kwargs, change, dtype, grad = case
    kwargs = dict(kwargs)
    out_f = kwargs.pop("out_f", OUT)
    proj = fp8_projection(IN, out_f, 2, **kwargs)
    if change is not None:
        change(proj)
    calls = spy(monkeypatch, kernel.fp8_gemm, "fp8_linear")
    x = rand((2, 3, IN), dtype, seed=4)
    if grad:
        x.requires_grad_()
    y = kernel.layers.FP8Linear.forward(proj, x)
    assert calls == []
    assert torch.equal(y, proj(x))
    if grad:
        y.float().sum().backward()
        assert x.grad is not None and x.grad.isfinite().all()


def test_layer_under_autocast_runs_the_module(kernel, monkeypatch, cpu_fp8_linear):
    calls = spy(monkeypatch, kernel.fp8_gemm, "fp8_linear")
    proj = fp8_projection(IN, OUT, 3)
    x = rand((3, IN), torch.bfloat16, seed=2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = kernel.layers.FP8Linear.forward(proj, x)
        expected = proj(x)
    assert calls == [] and torch.equal(y, expected)


def test_layer_keeps_the_modules_hooks(kernel, monkeypatch, cpu_fp8_linear):
    """Hooks on the FP8Linear itself run around the kernelized forward (nn.Module's
    __call__ runs them around the instance's forward), so fp8_linear still serves."""
    from types import MethodType

    proj = fp8_projection(IN, OUT, 6)
    x = rand((3, IN), torch.bfloat16, seed=8)
    with torch.no_grad():
        plain = kernel.fp8_linear(x * 2, proj.weight, proj.weight_scale_inv) * 2.0
    proj.register_forward_pre_hook(lambda mod, a: (a[0] * 2,))
    proj.register_forward_hook(_hook)
    proj.forward = MethodType(kernel.layers.FP8Linear.forward, proj)
    calls = spy(monkeypatch, kernel.fp8_gemm, "fp8_linear")
    with torch.no_grad():
        assert torch.equal(proj(x), plain)
    assert len(calls) == 1


def test_layer_compiles_fullgraph(kernel, cpu_fp8_linear):
    torch._dynamo.reset()
    proj = fp8_projection(IN, OUT, 4, bias=True)
    x = rand((6, IN), torch.bfloat16, seed=5)
    fn = torch.compile(lambda x: kernel.layers.FP8Linear.forward(proj, x), fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        assert torch.equal(fn(x), kernel.layers.FP8Linear.forward(proj, x))


def test_kernelized_projections_keep_the_fused_fp8_mlp(kernel, monkeypatch, cpu_fp8_linear):
    """A Gemma MLP whose FP8Linear projections are themselves kernelized (the layer's
    forward set on each instance, as kernelize does) still runs as one geglu_mlp_fp8;
    a projection with some other instance forward does not."""
    from types import MethodType

    from test_fp8_mlp import fp8_gemma_mlp, layer_weights, ref64 as mlp_ref64

    mlp = fp8_gemma_mlp()
    for proj in (mlp.gate_proj, mlp.up_proj, mlp.down_proj):
        proj.forward = MethodType(kernel.layers.FP8Linear.forward, proj)
    calls = spy(monkeypatch, kernel.fp8_mlp, "geglu_mlp_fp8")
    x = rand((2, 4, 256), torch.bfloat16, seed=6)
    with torch.no_grad():
        y = kernel.layers.GeGLUMLP.forward(mlp, x)
    assert len(calls) == 1
    assert_matches_ref(y, mlp_ref64(x, layer_weights(mlp), None, "tanh"), torch.bfloat16, "kernelized projections")
    mlp.down_proj.forward = lambda h: type(mlp.down_proj).forward(mlp.down_proj, h) * 3
    with torch.no_grad():
        kernel.layers.GeGLUMLP.forward(mlp, x)
    assert len(calls) == 1


def test_kernelized_projections_keep_the_fused_fp8_mlp_compiled(kernel, cpu_fp8_linear):
    """The same under torch.compile(fullgraph=True): the compiled MLP is the eager one,
    bit for bit, so the fused FP8 MLP ran and not three fp8_linear calls (whose gate,
    up and h round to x's dtype). The instance-forward test reads the bound method's
    __func__ directly: Dynamo 2.11 answered getattr's default for it."""
    from types import MethodType

    from test_fp8_mlp import fp8_gemma_mlp, layer_weights

    torch._dynamo.reset()
    mlp = fp8_gemma_mlp()
    for proj in (mlp.gate_proj, mlp.up_proj, mlp.down_proj):
        proj.forward = MethodType(kernel.layers.FP8Linear.forward, proj)
    x = rand((3, 256), torch.bfloat16, seed=7)
    fn = torch.compile(lambda x: kernel.layers.GeGLUMLP.forward(mlp, x), fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        fused = kernel.fp8_mlp.geglu_mlp_fp8(x, *layer_weights(mlp))
        assert torch.equal(kernel.layers.GeGLUMLP.forward(mlp, x), fused)
        assert torch.equal(fn(x), fused)


def test_kernelize_swaps_fp8_linear(kernel, cpu_fp8_linear):
    """kernels.kernelize with the recipe's mapping swaps an FP8Linear's forward for the
    layer, which then computes fp8_linear's result."""
    from kernels import LocalLayerRepository, Mode, kernelize, replace_kernel_forward_from_hub, use_kernel_mapping

    from conftest import REPO

    cls = cpu_fp8_linear.FP8Linear
    if getattr(cls, "kernel_layer_name", None) is None:
        replace_kernel_forward_from_hub(cls, "FP8Linear")
    model = nn.Sequential(fp8_projection(IN, OUT, 5), nn.Identity())
    mapping = {"FP8Linear": {"cpu": LocalLayerRepository(repo_path=REPO, layer_name="FP8Linear")}}
    with use_kernel_mapping(mapping):
        kernelize(model, mode=Mode.INFERENCE, device="cpu")
    assert "forward" in model[0].__dict__
    x = rand((3, IN), torch.bfloat16, seed=7)
    with torch.no_grad():
        y = model(x)
    assert_matches_ref(y, ref64(x, model[0].weight, model[0].weight_scale_inv), torch.bfloat16, "kernelized")


# --------------------------------------------------------------------------- CUDA


@pytest.fixture
def native(kernel):
    if not HAS_CUDA:
        pytest.skip("needs a CUDA GPU")
    op = getattr(kernel._ops.ops, "_fp8_linear", None)
    if op is None:
        pytest.skip("this build has no _fp8_linear op (noarch / CPU variant)")
    if not kernel._ops.ops._geglu_mlp_fp8_serves(torch.empty(0, device="cuda")):
        cc = "".join(map(str, torch.cuda.get_device_capability()))
        pytest.skip(f"the build has no FP8 kernels for this GPU (sm_{cc}; they are sm_90's)")
    return op


# (M values, (in, out)): Gemma's attention projections and the engine's edges. 1-16:
# the decode kernel (8- and 16-token wgmmas; at 8192 -> 4096 each block's K split is 8
# blocks, past its ring of 6 stages, so every stage's tokens' box is quantized into
# again); 17-64: the stream-K GEMM; above: the data-parallel GEMM, in clusters of two
# from 2048 output columns on (2176: 17 tiles, one cluster half out of bounds).
CUDA_GRID = [
    ([1, 2, 8, 9, 16, 17, 64, 65, 129, 1000], (128, 128)),
    ([1, 16, 17, 2048], (3072, 4096)),
    ([1, 16, 64, 2048], (4096, 3072)),
    ([1, 7, 16, 33, 2048], (2048, 2048)),
    ([1, 16, 17, 2048], (2048, 256)),
    ([5, 129, 1000], (256, 2176)),
    ([1, 5, 12, 16], (8192, 4096)),
]
CUDA_CASES = [(m, shape) for ms, shape in CUDA_GRID for m in ms]


@cuda
@pytest.mark.parametrize("extras", ["", "bias", "residual", "bias+residual"])
@pytest.mark.parametrize("case", CUDA_CASES, ids=lambda c: f"M{c[0]}-" + "x".join(map(str, c[1])))
def test_native_grid(kernel, native, monkeypatch, case, extras):
    m, (k, n) = case
    bias = torch.float32 if "bias" in extras else None
    x, q, s, b, r, w = linear_inputs(m, k, n, torch.bfloat16, seed=m, device="cuda", bias=bias, residual="residual" in extras)

    def no_composite(*args):
        raise AssertionError("the composite ran where the native op should")

    monkeypatch.setattr(kernel.fp8_gemm, "_composed_fp8_linear", no_composite)
    poison_allocator(4 * m * n + (1 << 20))
    y = kernel.fp8_linear(x, q, s, b, r)
    assert y.dtype == torch.bfloat16 and y.shape == (m, n)
    assert_kernel_matches_ref(y, ref64(x, q, s, b, r), unquantized64(x, w, b, r), f"M={m} {extras}")


@cuda
@pytest.mark.parametrize("k", [768, 8192])
@pytest.mark.parametrize("lead", [(3, 43), (1, 5), (2, 6)], ids=lambda l: f"M{l[0] * l[1]}")
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
def test_native_dtypes_and_leading_dims(native, dtype, lead, k):
    """129 rows (the GEMMs), 5 and 12 (the decode kernel's 8- and 16-token forms, which
    quantize x of either dtype themselves; at K = 8192 past the ring's depth)."""
    x, q, s, _, r, _ = linear_inputs(0, k, 1024, dtype, seed=5, device="cuda", residual=True, lead=lead)
    y = native.default(x, q, s, r)
    assert y.shape == (*lead, 1024) and y.dtype == dtype
    assert_kernel_matches_ref(y, ref64(x, q, s, None, r), what=str(dtype))


@cuda
@pytest.mark.profiler
@pytest.mark.parametrize("m", [1, 16, 17])
def test_native_decode_is_one_kernel(kernel, native, m):
    """At 1-16 tokens fp8_linear is one launch, the decode kernel quantizing x itself;
    at 17 the quantization pass first, then the stream-K GEMM (with its own kernels)."""
    x, q, s, _, r, _ = linear_inputs(m, 3072, 4096, torch.bfloat16, seed=8, device="cuda", residual=True)
    with torch.no_grad():
        kernel.fp8_linear(x, q, s, residual=r)  # first call: set-up outside the profile
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            y = kernel.fp8_linear(x, q, s, residual=r)
            torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    if m <= 16:
        assert len(names) == 1 and "fp8_decode" in names[0], names
    else:
        assert "quantize_rows" in names[0] and not any("fp8_decode" in n for n in names), names
    assert_kernel_matches_ref(y, ref64(x, q, s, None, r), what=f"M={m}")


@cuda
@pytest.mark.parametrize("m", [4, 100])
def test_native_zero_huge_inf_nan_rows(kernel, native, m):
    x, q, s, _, r, _ = linear_inputs(m, 768, 1024, torch.bfloat16, seed=6, device="cuda", residual=True)
    x[1] = 0
    x[2, 300:428] = 0
    x[3, 5] = 1e4
    x[m - 1, 700] = float("nan")
    x[m - 2, 10] = float("inf")
    y = kernel.fp8_linear(x, q, s, residual=r)
    assert y[m - 1].isnan().all() and y[m - 2].isnan().all()
    keep = list(range(m - 2))
    assert_kernel_matches_ref(y[keep], ref64(x[keep], q, s, None, r[keep]), what="edge rows")
    assert torch.equal(y[1], r[1])


@cuda
@pytest.mark.parametrize("m", [3, 100])
def test_native_misaligned_and_strided_views(kernel, native, m):
    """x, weight and residual as views whose data is not 16-byte aligned, x transposed:
    the function copies what the kernels cannot read, and the results are those of
    the aligned tensors."""
    x, q, s, b, r, _ = linear_inputs(m, 512, 384, torch.bfloat16, seed=7, device="cuda", bias=torch.bfloat16, residual=True)
    expected = kernel.fp8_linear(x, q, s, b, r)
    xb = torch.empty(m * 512 + 3, dtype=x.dtype, device="cuda")
    xm = xb[3:].view(m, 512)
    xm.copy_(x)
    qb = torch.empty(384 * 512 + 5, dtype=torch.uint8, device="cuda").view(FP8)
    qm = qb[5:].view(384, 512)
    qm.copy_(q)
    rb = torch.empty(m * 384 + 1, dtype=r.dtype, device="cuda")
    rm = rb[1:].view(m, 384)
    rm.copy_(r)
    assert xm.data_ptr() % 16 and qm.data_ptr() % 16 and rm.data_ptr() % 16
    assert_same_up_to_accumulation_order(kernel.fp8_linear(xm, qm, s, b, rm), expected)
    xt = x.t().contiguous().t()
    assert_same_up_to_accumulation_order(kernel.fp8_linear(xt, q, s, b, r), expected)
    with pytest.raises(ValueError, match=r"^x must be 16-byte aligned"):
        native.default(xm, q, s, None)


@cuda
@pytest.mark.parametrize("m", [1, 16, 64, 129])
def test_native_weight_over_2_31_elements_large(kernel, native, m):
    """A weight of > 2^31 elements (131200 x 16384): the rows past element 2^31 (the
    last 128 outputs) carry scales 30x larger, so an offset that wrapped would show."""
    k, n = 16384, (1 << 17) + 128
    gen = torch.Generator(device="cuda").manual_seed(7)
    bits = torch.randint(0, 0x7F, (n, k), device="cuda", dtype=torch.uint8, generator=gen)
    bits |= torch.randint(0, 2, (n, k), device="cuda", dtype=torch.uint8, generator=gen) << 7
    q = bits.view(FP8)
    s = torch.rand((n // 128, k // 128), device="cuda", generator=gen).add_(0.5).mul_(k**-0.5 / 200)
    s[-1] *= 30
    x = rand((m, k), torch.bfloat16, 8, device="cuda")
    y = kernel.fp8_linear(x, q, s)
    xq = quantize_rows_ref(x)
    ref = torch.cat([xq @ dequantize_ref(q[r : r + 8192], s[r // 128 : (r + 8192) // 128]).T for r in range(0, n, 8192)], dim=1)
    del q, bits
    assert_kernel_matches_ref(y, ref, None, f"M={m}, {n} x {k} weight")


@cuda
@pytest.mark.parametrize("residual", [False, True], ids=["", "residual"])
def test_native_opcheck(native, residual):
    x, q, s, _, r, _ = linear_inputs(7, 256, 384, torch.bfloat16, device="cuda", residual=residual)
    utils = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
    torch.library.opcheck(native.default, (x, q, s, r), test_utils=utils)
    torch.library.opcheck(native.default, (x.reshape(7, 1, 256), q, s, None if r is None else r.reshape(7, 1, 384)), test_utils=utils)


@cuda
def test_native_compile_fullgraph(kernel, native):
    torch._dynamo.reset()
    x, q, s, b, r, _ = linear_inputs(16, 768, 1024, torch.bfloat16, device="cuda", bias=torch.bfloat16, residual=True)
    fn = torch.compile(lambda x, r: kernel.fp8_linear(x, q, s, b, r), fullgraph=True)
    assert_same_up_to_accumulation_order(fn(x, r), kernel.fp8_linear(x, q, s, b, r))
    x2 = rand((40, 768), torch.bfloat16, seed=9, device="cuda")
    r2 = rand((40, 1024), torch.bfloat16, seed=10, device="cuda")
    assert_kernel_matches_ref(fn(x2, r2), ref64(x2, q, s, b, r2), what="compiled, new M")


@cuda
@pytest.mark.parametrize("m", [1, 16, 64, 256])  # decode kernel; stream-K; data-parallel
def test_native_cuda_graph_capture_and_replay(kernel, native, m):
    x, q, s, _, r, _ = linear_inputs(m, 768, 1024, torch.bfloat16, device="cuda", residual=True)
    static_x, static_r = x.clone(), r.clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            kernel.fp8_linear(static_x, q, s, residual=static_r)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = kernel.fp8_linear(static_x, q, s, residual=static_r)
    for seed in (1, 2):
        new_x = rand((m, 768), torch.bfloat16, seed=seed, device="cuda")
        static_x.copy_(new_x)
        static_y.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert_same_up_to_accumulation_order(static_y, kernel.fp8_linear(new_x, q, s, residual=static_r))


@cuda
@pytest.mark.parametrize("case", BAD_CASES, ids=lambda c: c[0])
def test_native_bad_inputs_raise_named_errors(kernel, native, case):
    _, mutate, error, match = case
    args = _good_args("cuda")
    _with_device(mutate, "cuda", stays=lambda v: v.is_sparse)(args)
    with pytest.raises(error, match=match):
        kernel.fp8_linear(**args)


@cuda
def test_layer_on_cuda(kernel, monkeypatch):
    """The FP8Linear layer on CUDA: fp8_linear on the module's tensors where the FP8
    kernels serve the GPU; elsewhere FP8Linear's own forward."""
    pytest.importorskip("transformers.integrations.finegrained_fp8")
    if not kernel.fp8_mlp._native_fp8_x(torch.empty(0, device="cuda")):
        pytest.skip("no FP8 kernels for this GPU in this build: the layer keeps FP8Linear's own forward")
    calls = spy(monkeypatch, kernel.fp8_gemm, "fp8_linear")
    proj = fp8_projection(2048, 256, 8, bias=True, device="cuda")
    x = rand((2, 9, 2048), torch.bfloat16, seed=4, device="cuda")
    with torch.no_grad():
        y = kernel.layers.FP8Linear.forward(proj, x)
    assert len(calls) == 1
    assert_kernel_matches_ref(y, ref64(x, proj.weight, proj.weight_scale_inv, proj.bias), what="layer")
