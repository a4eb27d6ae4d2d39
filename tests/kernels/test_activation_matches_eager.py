"""The activation contract of kernels-community/activation: the same bits as eager.

That package's tests assert gelu_and_mul(out, x) == F.gelu(x[..., :d], approximate) *
x[..., d:] with atol = rtol = 0 in float16, bfloat16 and float32, and the same of gelu /
gelu_tanh against F.gelu. Eager rounds twice: F.gelu's result to the storage dtype, then
the product. Here, against eager on the same device and the same tensors:

CUDA (marked cuda; skipped, and reported as skipped, without a GPU): the compiled
kernels compute ATen's own float formula (erff / tanhf, same operation order and FMA
contraction) and round like eager, so every function, geglu / geglu_merged and the
four activation layers are compared with torch.equal: float16, bfloat16, float32, at
7, 83 and 2048 tokens of widths 512 and 13824, odd widths, 3-D inputs and row-strided
inputs and outputs. The Triton kernels (the CPU variant on CUDA tensors) compute the
same formula with libdevice's erf / tanh: compared within the CPU bounds below.

CPU: ATen's vectorized erf / tanh call SLEEF (in libtorch, outside the stable ABI), so
the CPU kernels use float32 copies of about one ulp that agree with SLEEF's for most
arguments, and eager is not one function either (its scalar tail uses std::erf /
std::tanh; a contiguous float32 or bfloat16 input takes oneDNN's exact GELU). Bounds
(ulp: of the storage dtype, at the larger magnitude of the two results):
  activation (gelu, gelu_tanh)   |ours - eager| <= 1 ulp + |x| * 2^-23
  product (gelu_and_mul & co.)   |ours - eager| <= 2 ulp + |gate * up| * 2^-23
The |x| * 2^-23 term is float32 noise where eager's own 1 + erf / 1 + tanh cancels
(x < -1.5): one float32 ulp of tanh there moves gelu by |x| * 2^-25; it is below a
float16 / bfloat16 ulp wherever |gelu| > 2^-15 |x|. One ulp of the activation moves
the product by up to two ulps. Measured (AVX-512 and AVX2, torch 2.13): every float16
and bfloat16 gate value gives eager's activation except one (float16 -2.0137, tanh),
so at most 0.1% of float16 / bfloat16 results may differ at all; float32 results
differ from eager's in ~0.1% (exact) and ~3.5% (tanh) of elements (at most 5% here).
The DEFAULT instruction set (std::erf / std::tanh per lane, as ATen's) is bit-equal.
The oneDNN route (eager's exact F.gelu of a contiguous float32 / bfloat16 tensor) is
another formula: checked within 8 ulps + |x| * 2^-20.

Triton under the interpreter (CPU, TRITON_INTERPRET=1; small shapes): its erf is
Python's (correctly rounded), eager CPU's the A&S fit (1.5e-7): the same bounds with
the noise term doubled, |x| * 2^-22. Triton on CUDA: the same bounds against eager's
CUDA results (its tanh, one exp and one division, is within ~1e-7 of tanhf).
"""

import pytest
import torch
import torch.nn.functional as F

from conftest import HAS_CUDA, poisoned_like

DTYPES = [torch.float16, torch.bfloat16, torch.float32]
APPROX = ["none", "tanh"]
# (tokens, d): the contract's shapes, x = [tokens, 2d].
CUDA_SHAPES = [(t, d) for t in (7, 83, 2048) for d in (512, 13824)]
CPU_SHAPES = [(7, 512), (83, 512), (2048, 512), (7, 13824), (83, 13824)]
ODD_WIDTHS = [1, 3, 45, 517, 1029]

# Gate values far into both tails and past the saturations, placed in the first row.
SPECIALS = [-30.0, -12.0, -9.5, -8.7, -5.5, -4.0, -2.0137, -1e-3, 1e-3, 2.0, 5.5, 9.5, 12.0, 30.0]
LARGE = {torch.float16: [-6e4, -1e3, 1e3, 6e4], torch.bfloat16: [-1e30, -1e6, 1e6, 1e30],
         torch.float32: [-1e30, -1e6, 1e6, 1e30]}  # fmt: skip

MANTISSA = {torch.float32: (23, -126), torch.float16: (10, -14), torch.bfloat16: (7, -126)}


def rand(shape, dtype, device, seed=0):
    """randn * 3 (fixed seed, never all zero) with tail and large-magnitude values in the
    first row of the last dim's leading entries, rounded to dtype."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=torch.float32) * 3
    special = torch.tensor(SPECIALS + LARGE[dtype])
    flat = x.view(-1, shape[-1])
    n = min(special.numel(), shape[-1])
    flat[0, :n] = special[:n]
    return x.to(device=device, dtype=dtype)


def eager_and_mul(x, approximate):
    d = x.shape[-1] // 2
    return F.gelu(x[..., :d], approximate=approximate) * x[..., d:]


def and_mul_fn(k, approximate):
    return k.gelu_tanh_and_mul if approximate == "tanh" else k.gelu_and_mul


def gelu_fn(k, approximate):
    return k.gelu_tanh if approximate == "tanh" else k.gelu


def assert_equal(actual, expected, what):
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, what
    if not torch.equal(actual, expected):
        diff = (actual != expected) & ~(actual.isnan() & expected.isnan())
        i = diff.nonzero()[0].tolist()
        raise AssertionError(
            f"{what}: {int(diff.sum())} of {diff.numel()} elements differ from eager, "
            f"first at {i}: {actual[tuple(i)].item()!r} != {expected[tuple(i)].item()!r}"
        )


def ulp(v: torch.Tensor, dtype) -> torch.Tensor:
    """The spacing of dtype at |v| (float64 tensor): 2^(exponent - mantissa bits), the
    subnormal spacing below the smallest normal."""
    bits, emin = MANTISSA[dtype]
    v = v.abs()
    e = torch.frexp(v).exponent.double() - 1
    e = torch.where(v > 0, e, torch.full_like(e, emin)).clamp_min(emin)
    return torch.exp2(e - bits)


CPU_NOISE = 2.0**-23
INTERPRETER_NOISE = 2.0**-22


def assert_within(actual, expected, scale, ulps, what, noise=CPU_NOISE):
    """|actual - expected| <= ulps * ulp + |scale| * noise, elementwise (NaN where both are)."""
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, what
    a, e = actual.double(), expected.double()
    both_nan = a.isnan() & e.isnan()
    assert not (a.isnan() ^ e.isnan()).any(), f"{what}: NaN in one result only"
    same_inf = torch.isinf(a) & (a == e)
    err = torch.where(both_nan | same_inf, 0.0, (a - e).abs())
    bound = ulps * ulp(torch.maximum(a.abs(), e.abs()), actual.dtype) + scale.double().abs() * noise
    bad = err > bound
    if bad.any():
        i = tuple(bad.nonzero()[0].tolist())
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {bad.numel()} elements beyond {ulps} ulp + |scale| * {noise:g}, "
            f"e.g. at {list(i)}: {actual[i].item()!r} vs eager {expected[i].item()!r}"
        )


# =========================================================================== CUDA: bit for bit


@pytest.fixture(scope="module")
def cuda_kernel(kernel):
    """The loaded variant must run the compiled CUDA kernels on CUDA tensors."""
    if kernel.activation._backend(torch.empty(1, device="cuda")) != "native":
        pytest.fail("the loaded variant has no compiled CUDA ops: build the CUDA variant first")
    return kernel


@pytest.mark.cuda
@pytest.mark.parametrize("shape", CUDA_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("approximate", APPROX)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cuda_functions_equal_eager(cuda_kernel, dtype, approximate, shape):
    k = cuda_kernel
    tokens, d = shape
    x = rand((tokens, 2 * d), dtype, "cuda")
    gate, up = x[:, :d], x[:, d:]
    expected = eager_and_mul(x, approximate)
    out = poisoned_like(expected)
    assert and_mul_fn(k, approximate)(out, x) is out
    assert_equal(out, expected, "gelu(_tanh)_and_mul")
    assert_equal(k.geglu(gate, up, approximate), expected, "geglu on the halves of x")
    assert_equal(k.geglu(gate.contiguous(), up.contiguous(), approximate), expected, "geglu")
    assert_equal(k.geglu_merged(x, approximate), expected, "geglu_merged")
    out = poisoned_like(x)
    gelu_fn(k, approximate)(out, x)
    assert_equal(out, F.gelu(x, approximate=approximate), "gelu(_tanh)")


@pytest.mark.cuda
@pytest.mark.parametrize("shape", CUDA_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cuda_layers_equal_eager(cuda_kernel, dtype, shape):
    layers = cuda_kernel.layers
    tokens, d = shape
    x = rand((tokens, 2 * d), dtype, "cuda", seed=1)
    with torch.no_grad():
        assert_equal(layers.GeluAndMul()(x), eager_and_mul(x, "none"), "GeluAndMul")
        assert_equal(layers.GeluTanhAndMul()(x), eager_and_mul(x, "tanh"), "GeluTanhAndMul")
        assert_equal(layers.Gelu()(x), F.gelu(x), "Gelu")
        assert_equal(layers.GeluTanh()(x), F.gelu(x, approximate="tanh"), "GeluTanh")
    # With autograd: the merged layers keep the kernel forward; the GELU layers run torch's.
    xg = x.detach().requires_grad_()
    assert_equal(layers.GeluAndMul()(xg).detach(), eager_and_mul(x, "none"), "GeluAndMul (grad)")
    assert_equal(layers.GeluTanhAndMul()(xg).detach(), eager_and_mul(x, "tanh"), "GeluTanhAndMul (grad)")


@pytest.mark.cuda
@pytest.mark.parametrize("approximate", APPROX)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cuda_odd_widths_and_strided_rows_equal_eager(cuda_kernel, dtype, approximate):
    """Odd widths (the scalar path and the vector path's tails), x a column slice of a
    wider buffer (row stride past 2d, misaligned), out a column slice, 3-D inputs."""
    k = cuda_kernel
    for d in ODD_WIDTHS:
        buf = rand((9, 2 * d + 5), dtype, "cuda", seed=d)
        for x in (buf[:, :2 * d], buf[:, 3:3 + 2 * d], rand((2, 5, 2 * d), dtype, "cuda", seed=d + 1)):
            expected = eager_and_mul(x, approximate)
            out_buf = torch.full(x.shape[:-1] + (d + 3,), float("nan"), dtype=dtype, device="cuda")
            out = out_buf[..., 1:1 + d]
            and_mul_fn(k, approximate)(out, x)
            assert_equal(out, expected, f"and_mul d={d} strides {x.stride()}")
            assert out_buf[..., :1].isnan().all() and out_buf[..., 1 + d:].isnan().all()
            gate, up = x[..., :d], x[..., d:]
            assert_equal(k.geglu(gate, up, approximate), expected, f"geglu d={d}")
            assert_equal(k.geglu_merged(x, approximate), expected, f"geglu_merged d={d}")
            g_out = poisoned_like(gate)
            gelu_fn(k, approximate)(g_out, gate)
            assert_equal(g_out, F.gelu(gate, approximate=approximate), f"gelu d={d} strided")


@pytest.mark.cuda
@pytest.mark.parametrize("approximate", APPROX)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cuda_every_half_value_equals_eager(cuda_kernel, dtype, approximate):
    """Every finite float16 / bfloat16 value as gate (a sample of float32), up random."""
    k = cuda_kernel
    if dtype == torch.float32:
        gate = rand((1 << 16,), dtype, "cuda", seed=5)
    else:
        gate = torch.arange(-(1 << 15), 1 << 15, dtype=torch.int32).to(torch.int16).view(dtype)
        gate = gate[torch.isfinite(gate)].to("cuda")
    up = rand(gate.shape, dtype, "cuda", seed=6)
    x = torch.stack([gate, up]).reshape(2, -1, 64).permute(1, 0, 2).reshape(-1, 128)  # rows [gate | up]
    assert_equal(k.geglu_merged(x, approximate), eager_and_mul(x, approximate), "every gate value")
    out = poisoned_like(gate)
    gelu_fn(k, approximate)(out, gate)
    assert_equal(out, F.gelu(gate, approximate=approximate), "gelu of every value")


@pytest.mark.cuda
@pytest.mark.parametrize("approximate", APPROX)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cuda_triton_within_bounds_of_eager(cpu_kernel, dtype, approximate):
    """The Triton kernels (the CPU variant's route for CUDA tensors): ATen's formula with
    libdevice's erf and a one-exp tanh, and eager's rounding: checked within the
    interpreter's bounds (the tanh's ~1e-7 error doubles the float32 noise where 1 + tanh
    cancels)."""
    k = cpu_kernel
    assert k.activation._backend(torch.empty(1, device="cuda")) == "triton"
    for tokens, d in [(7, 512), (83, 13824), (5, 517)]:
        x = rand((tokens, 2 * d), dtype, "cuda", seed=d)
        out = poisoned_like(x[:, :d])
        and_mul_fn(k, approximate)(out, x)
        assert_within(out, eager_and_mul(x, approximate), x[:, :d] * x[:, d:], 2, "triton and_mul", INTERPRETER_NOISE)
        out = poisoned_like(x)
        gelu_fn(k, approximate)(out, x)
        assert_within(out, F.gelu(x, approximate=approximate), x, 1, "triton gelu", INTERPRETER_NOISE)


@pytest.mark.cuda
@pytest.mark.parametrize("approximate", APPROX)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cuda_variant_on_cpu_tensors_is_eager(cuda_kernel, dtype, approximate):
    """The CUDA variant has no CPU kernel: its composite runs eager's own ops."""
    k = cuda_kernel
    x = rand((7, 2 * 45), dtype, "cpu")
    out = poisoned_like(x[:, :45])
    and_mul_fn(k, approximate)(out, x)
    assert_equal(out, eager_and_mul(x, approximate), "composite and_mul")
    out = poisoned_like(x)
    gelu_fn(k, approximate)(out, x)
    assert_equal(out, F.gelu(x, approximate=approximate), "composite gelu")


# =========================================================================== CPU: ulp-bounded


@pytest.mark.parametrize("shape", CPU_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("approximate", APPROX)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cpu_functions_within_bounds_of_eager(cpu_kernel, dtype, approximate, shape):
    k = cpu_kernel
    tokens, d = shape
    x = rand((tokens, 2 * d), dtype, "cpu")
    gate, up = x[:, :d], x[:, d:]
    scale = gate.double() * up.double()
    expected = eager_and_mul(x, approximate)
    out = poisoned_like(expected)
    assert and_mul_fn(k, approximate)(out, x) is out
    assert_within(out, expected, scale, 2, "gelu(_tanh)_and_mul")
    differing = (out != expected).double().mean().item()
    assert differing <= (0.05 if dtype == torch.float32 else 1e-3), f"{differing:.2%} of elements differ"
    assert torch.equal(k.geglu(gate, up, approximate), out), "geglu on the halves of x"
    assert torch.equal(k.geglu_merged(x, approximate), out), "geglu_merged"
    assert_within(k.geglu(gate.contiguous(), up.contiguous(), approximate), expected, scale, 2, "geglu")
    # gelu of the gate half: a strided input, so eager runs ATen's kernel (not oneDNN).
    out = poisoned_like(gate)
    gelu_fn(k, approximate)(out, gate)
    assert_within(out, F.gelu(gate, approximate=approximate), gate, 1, "gelu(_tanh)")


@pytest.mark.parametrize("approximate", APPROX)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cpu_odd_widths_and_strided_rows_within_bounds(cpu_kernel, dtype, approximate):
    k = cpu_kernel
    for d in ODD_WIDTHS:
        buf = rand((9, 2 * d + 5), dtype, "cpu", seed=d)
        for x in (buf[:, :2 * d], buf[:, 3:3 + 2 * d], rand((2, 5, 2 * d), dtype, "cpu", seed=d + 1)):
            gate, up = x[..., :d], x[..., d:]
            out_buf = torch.full(x.shape[:-1] + (d + 3,), float("nan"), dtype=dtype)
            out = out_buf[..., 1:1 + d]
            and_mul_fn(k, approximate)(out, x)
            assert_within(out, eager_and_mul(x, approximate), gate.double() * up.double(), 2, f"and_mul d={d}")
            assert out_buf[..., :1].isnan().all() and out_buf[..., 1 + d:].isnan().all()
            g_out = poisoned_like(gate)
            gelu_fn(k, approximate)(g_out, gate)
            assert_within(g_out, F.gelu(gate, approximate=approximate), gate, 1, f"gelu d={d}")


@pytest.mark.parametrize("approximate", APPROX)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_cpu_every_half_value_gives_eagers_activation(cpu_kernel, dtype, approximate):
    """Every finite float16 / bfloat16 value, through eager's vector body (a strided
    [n, 64] view): at most two activations differ, by one ulp (measured: one, float16
    -2.0137 with the tanh form, where SLEEF's tanh and ours round an ulp apart)."""
    gate = torch.arange(-(1 << 15), 1 << 15, dtype=torch.int32).to(torch.int16).view(dtype)
    gate = gate[torch.isfinite(gate)]
    gate = gate[: gate.numel() // 64 * 64]
    buf = torch.zeros(gate.numel() // 64, 128, dtype=dtype)
    buf[:, :64] = gate.view(-1, 64)
    g = buf[:, :64]
    expected = F.gelu(g, approximate=approximate)
    out = poisoned_like(g)
    gelu_fn(cpu_kernel, approximate)(out, g)
    assert_within(out, expected, torch.zeros_like(g), 1, "every value", noise=0.0)
    assert int((out != expected).sum()) <= 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_cpu_gelu_against_onednn(cpu_kernel, dtype):
    """Eager's exact F.gelu of a contiguous float32 (with AVX-512: bfloat16) tensor is
    oneDNN's, another formula: within 8 ulps + |x| * 2^-20 of it."""
    x = rand((83, 1024), dtype, "cpu", seed=3)
    out = poisoned_like(x)
    cpu_kernel.gelu(out, x)
    assert_within(out, F.gelu(x), x, 8, "gelu vs oneDNN", noise=2.0**-20)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cpu_layers_give_the_functions_bits(cpu_kernel, dtype):
    layers = cpu_kernel.layers
    x = rand((83, 2 * 517), dtype, "cpu", seed=4)
    with torch.no_grad():
        for layer, approximate in ((layers.GeluAndMul(), "none"), (layers.GeluTanhAndMul(), "tanh")):
            out = poisoned_like(x[:, :517])
            and_mul_fn(cpu_kernel, approximate)(out, x)
            assert torch.equal(layer(x), out), type(layer).__name__
        for layer, approximate in ((layers.Gelu(), "none"), (layers.GeluTanh(), "tanh")):
            out = poisoned_like(x)
            gelu_fn(cpu_kernel, approximate)(out, x)
            assert torch.equal(layer(x), out), type(layer).__name__


@pytest.mark.parametrize("approximate", APPROX)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_composite_is_eager(cpu_kernel, dtype, approximate):
    """The eager composite (the route of devices without a kernel) is eager's own ops."""
    act = cpu_kernel.activation
    x = rand((7, 2 * 45), dtype, "cpu")
    assert torch.equal(act._eager_geglu(x[:, :45], x[:, 45:], approximate), eager_and_mul(x, approximate))


# =========================================================================== Triton, interpreted


@pytest.fixture(scope="module")
def interpreted_triton(cpu_kernel):
    ta = cpu_kernel.triton_kernels.activation
    if HAS_CUDA or not ta.HAS_TRITON or not ta._interpreted():
        pytest.skip("Triton's interpreter runs on CPU-only machines (TRITON_INTERPRET=1, set by conftest)")
    return ta


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # x^3 of 1e30, as on a GPU
@pytest.mark.parametrize("shape", [(3, 64), (5, 133), (2, 3, 45)], ids=str)
@pytest.mark.parametrize("approximate", APPROX)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_triton_interpreted_within_bounds_of_eager(interpreted_triton, dtype, approximate, shape):
    ta = interpreted_triton
    d = shape[-1]
    x = rand(shape[:-1] + (2 * d,), dtype, "cpu", seed=d)
    gate, up = x[..., :d], x[..., d:]
    out = poisoned_like(gate)
    ta.geglu_forward(out, gate, up, approximate)
    noise = INTERPRETER_NOISE
    assert_within(out, eager_and_mul(x, approximate), gate.double() * up.double(), 2, "triton geglu", noise)
    out = poisoned_like(gate)
    ta.geglu_forward(out, gate, None, approximate)
    assert_within(out, F.gelu(gate, approximate=approximate), gate, 1, "triton gelu", noise)
