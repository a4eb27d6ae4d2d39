"""The compiled native ops (`torch.ops._geglu_<backend>_<uid>.*`), called directly.

These test the C++ kernels themselves, below the public Python API: numerics against
float64 references of the GELU formulas, every width class (shorter than a vector,
not a multiple of one, wide rows split across threads), row-strided views, offsets
past 2^31 elements, and the argument checks. Each test runs on CPU (the CPU variant)
and, on a GPU machine, on CUDA (the CUDA variant, which implements the same schemas).
The CPU variant's per-ISA builds (baseline, AVX2, AVX-512) are each run in a
subprocess, selected with ATEN_CPU_CAPABILITY as ATen selects its own kernels.
"""

import math
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

from conftest import REPO, REPO_ID, STORAGE_TOLERANCE, poisoned_like

APPROXIMATE = ["none", "tanh"]
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
TOLERANCE = STORAGE_TOLERANCE
# [..., width]: one element; widths below, between and above every vector length
# (a vector step is 16 or 32 elements, depending on the ISA); one wide row; 3-D; enough
# rows to be split across threads; rows wide enough to be split into segments.
SHAPES = [
    (1, 1),
    (1, 3),
    (2, 7),
    (3, 13),
    (4, 67),
    (2, 1000),
    (2, 4097),
    (1, 8192),
    (2, 3, 17),
    (512, 257),
    (2, 2 * 16384 + 5),
]
WIDTHS = [1, 3, 7, 13, 67, 1000, 4097]

# The native ops raise ValueError (TORCH_CHECK_VALUE) on CPU; RuntimeError is accepted
# so the CUDA variant may use TORCH_CHECK. Messages must name the argument.
ERRORS = (ValueError, RuntimeError)

DEVICE_PARAMS = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


def native_ops(kernel):
    """The native op namespace of a loaded variant."""
    return kernel._ops.ops


@pytest.fixture(params=DEVICE_PARAMS)
def device(request):
    return request.param


@pytest.fixture
def ops(device, request):
    # CPU tensors go to the CPU variant even where `kernel` is the CUDA one.
    return native_ops(request.getfixturevalue("cpu_kernel" if device == "cpu" else "kernel"))


# --------------------------------------------------------------------------- references

SQRT_HALF = 1.0 / math.sqrt(2.0)
INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
BETA = math.sqrt(2.0 / math.pi)
KAPPA = 0.044715


def gelu_ref(x: torch.Tensor, approximate: str) -> torch.Tensor:
    x = x.double()
    if approximate == "none":
        return 0.5 * x * (1.0 + torch.erf(x * SQRT_HALF))
    return 0.5 * x * (1.0 + torch.tanh(BETA * (x + KAPPA * x**3)))


def gelu_grad_ref(x: torch.Tensor, approximate: str) -> torch.Tensor:
    """d gelu / dx, written out (not autograd), in float64."""
    x = x.double()
    if approximate == "none":
        cdf = 0.5 * (1.0 + torch.erf(x * SQRT_HALF))
        pdf = torch.exp(-0.5 * x * x) * INV_SQRT_2PI
        return cdf + x * pdf
    t = torch.tanh(BETA * (x + KAPPA * x**3))
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * BETA * (1.0 + 3.0 * KAPPA * x * x)


def randn(shape, dtype, device, seed):
    """Fresh random values (never zeros), rounded to `dtype`."""
    g = torch.Generator().manual_seed(seed)
    return (2.0 * torch.randn(shape, generator=g, dtype=torch.float64)).to(dtype).to(device)


def assert_close(actual: torch.Tensor, expected: torch.Tensor, dtype):
    assert not torch.isnan(actual).any(), "NaN in the result: elements were not written"
    torch.testing.assert_close(actual.cpu().double(), expected.cpu().double(), **TOLERANCE[dtype])


def both(*words):
    """A pytest.raises `match` pattern: every word appears in the message (any order)."""
    return "(?is)" + "".join(f"(?=.*{w})" for w in words)


def test_reference_formulas_match_autograd():
    x = randn((4096,), torch.float64, "cpu", seed=0).requires_grad_()
    for approximate in APPROXIMATE:
        y = F.gelu(x, approximate=approximate)
        torch.testing.assert_close(gelu_ref(x.detach(), approximate), y.detach(), rtol=1e-12, atol=1e-12)
        (grad,) = torch.autograd.grad(y.sum(), x)
        torch.testing.assert_close(gelu_grad_ref(x.detach(), approximate), grad, rtol=1e-12, atol=1e-12)


# --------------------------------------------------------------------------- numerics


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("approximate", APPROXIMATE)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_geglu(ops, device, dtype, approximate, shape):
    gate, up = randn(shape, dtype, device, 1), randn(shape, dtype, device, 2)
    out = ops.geglu(gate, up, approximate)
    assert out.shape == gate.shape and out.dtype == dtype and out.device == gate.device
    assert out.is_contiguous()
    assert_close(out, gelu_ref(gate, approximate) * up.double(), dtype)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("approximate", APPROXIMATE)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_geglu_backward(ops, device, dtype, approximate, shape):
    gate, up = randn(shape, dtype, device, 3), randn(shape, dtype, device, 4)
    grad_out = randn(shape, dtype, device, 5)
    grad_gate, grad_up = ops.geglu_backward(grad_out, gate, up, approximate)
    for g in (grad_gate, grad_up):
        assert g.shape == gate.shape and g.dtype == dtype and g.is_contiguous()
    dy = grad_out.double()
    assert_close(grad_gate, dy * up.double() * gelu_grad_ref(gate, approximate), dtype)
    assert_close(grad_up, dy * gelu_ref(gate, approximate), dtype)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("op", ["gelu_and_mul", "gelu_tanh_and_mul"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gelu_and_mul(ops, device, dtype, op, shape):
    approximate = "tanh" if "tanh" in op else "none"
    d = shape[-1]
    x = randn((*shape[:-1], 2 * d), dtype, device, 6)
    out = poisoned_like(torch.empty(shape, dtype=dtype, device=device))
    assert getattr(ops, op)(out, x) is None
    assert_close(out, gelu_ref(x[..., :d], approximate) * x[..., d:].double(), dtype)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("op", ["gelu", "gelu_tanh"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gelu(ops, device, dtype, op, shape):
    approximate = "tanh" if "tanh" in op else "none"
    x = randn(shape, dtype, device, 7)
    out = poisoned_like(x)
    getattr(ops, op)(out, x)
    assert_close(out, gelu_ref(x, approximate), dtype)


@pytest.mark.parametrize("approximate", APPROXIMATE)
def test_extreme_values(ops, device, approximate):
    """Far tails saturate to 0 / x without inf or NaN; exact zeros stay zeros."""
    x = torch.tensor([-1e4, -100.0, -30.0, -10.0, -0.0, 0.0, 1e-30, 10.0, 30.0, 100.0, 1e4], device=device)
    up = torch.ones_like(x)
    out = ops.geglu(x, up, approximate)
    assert_close(out, gelu_ref(x, approximate), torch.float32)
    grad_gate, grad_up = ops.geglu_backward(up, x, up, approximate)
    assert torch.isfinite(grad_gate).all() and torch.isfinite(grad_up).all()
    assert_close(grad_gate, gelu_grad_ref(x, approximate), torch.float32)


def test_bfloat16_rounding_and_nan(cpu_kernel):
    """bfloat16 results are the float32 results rounded to nearest, ties to even (as
    torch rounds), with NaN kept NaN, in the vector body and the scalar tail alike.

    gelu_tanh(96) is exactly 96 in float32 and its slope exactly 1, so every product
    below is exact in float32 and only its rounding to bfloat16 decides the result.
    96 (1 + 2^-7) = 96.75 lies halfway between 96.5 and 97 (to even: 97) and
    96 (1 + 3 * 2^-7) = 98.25 halfway between 98 and 98.5 (to even: 98)."""
    ops = native_ops(cpu_kernel)
    width = 2 * 32 + 5  # vector steps of every ISA, then a scalar tail
    gate = torch.full((2, width), 96.0, dtype=torch.bfloat16)
    gate[0, 3] = gate[1, 40] = gate[1, width - 2] = float("nan")
    up = randn((2, width), torch.bfloat16, "cpu", 23)
    up[:, ::3] = 1 + 2**-7
    up[:, 1::3] = 1 + 3 * 2**-7
    dy = randn((2, width), torch.bfloat16, "cpu", 24)
    dy[:, ::4] = 1 + 3 * 2**-7

    def expect(*factors):
        product = torch.ones(gate.shape, dtype=torch.float32)
        for f in factors:
            product = product * f.float()
        return product.where(~gate.isnan(), float("nan")).bfloat16()

    def same(actual, expected):
        torch.testing.assert_close(actual, expected, rtol=0, atol=0, equal_nan=True)

    assert expect(gate, up)[0, 0] == 97 and expect(gate, up)[0, 1] == 98  # the ties
    same(ops.geglu(gate, up, "tanh"), expect(gate, up))
    out = poisoned_like(gate)
    ops.gelu_tanh_and_mul(out, torch.cat([gate, up], dim=-1))
    same(out, expect(gate, up))
    grad_gate, grad_up = ops.geglu_backward(dy, gate, up, "tanh")
    same(grad_gate, expect(dy, up))
    same(grad_up, expect(dy, gate))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_large_outputs(cpu_kernel, dtype):
    """Fresh outputs of several MiB, whose whole 2 MiB pages the CPU kernels advise as
    transparent huge pages before writing them."""
    ops = native_ops(cpu_kernel)
    shape = (768, 3080)  # 4.7 MB in bfloat16
    gate, up, dy = (randn(shape, dtype, "cpu", seed) for seed in (25, 26, 27))
    for approximate in APPROXIMATE:
        assert_close(ops.geglu(gate, up, approximate), gelu_ref(gate, approximate) * up.double(), dtype)
        grad_gate, grad_up = ops.geglu_backward(dy, gate, up, approximate)
        assert_close(grad_gate, dy.double() * up.double() * gelu_grad_ref(gate, approximate), dtype)
        assert_close(grad_up, dy.double() * gelu_ref(gate, approximate), dtype)
    out = poisoned_like(gate)
    ops.gelu(out, gate)
    assert_close(out, gelu_ref(gate, "none"), dtype)


def test_gelu_in_place(ops, device):
    x = randn((3, 77), torch.float32, device, 16)
    expected = gelu_ref(x, "tanh")
    ops.gelu_tanh(x, x)
    assert_close(x, expected, torch.float32)


def test_partial_overlap_refused(cpu_kernel):
    # CPU variant only: elements that share memory with a different view of the input
    # would be read after being written.
    ops = native_ops(cpu_kernel)
    buf = torch.randn(2 * 64 + 1)
    with pytest.raises(ERRORS, match=both("out", "overlap")):
        ops.gelu(buf[1:65], buf[:64])
    with pytest.raises(ERRORS, match=both("out", "overlap")):
        ops.gelu_and_mul(buf[:32], buf[:64])


def test_empty_tensors(ops, device):
    x = torch.empty(0, 8, device=device)
    assert ops.geglu(x, x, "tanh").shape == (0, 8)
    assert [t.shape for t in ops.geglu_backward(x, x, x, "none")] == [(0, 8), (0, 8)]
    ops.gelu_and_mul(torch.empty(0, 4, device=device), x)
    ops.gelu(torch.empty(3, 0, device=device), torch.empty(3, 0, device=device))


# --------------------------------------------------------------------------- layouts


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_row_strided_views(ops, device, dtype, width):
    """Column slices of wider tensors (row stride > width) are read and written in place."""
    rows, pad = 5, 9
    wide_gate = randn((rows, width + pad), dtype, device, 8)
    wide_up = randn((rows, width + 2 * pad), dtype, device, 9)
    gate, up = wide_gate[:, :width], wide_up[:, pad : pad + width]
    assert not gate.is_contiguous() or rows == 1
    for approximate in APPROXIMATE:
        assert_close(ops.geglu(gate, up, approximate), gelu_ref(gate, approximate) * up.double(), dtype)
        dy = randn((rows, 2 * width), dtype, device, 10)[:, width:]
        grad_gate, grad_up = ops.geglu_backward(dy, gate, up, approximate)
        assert_close(grad_gate, dy.double() * up.double() * gelu_grad_ref(gate, approximate), dtype)
        assert_close(grad_up, dy.double() * gelu_ref(gate, approximate), dtype)

    # Merged input sliced from a wider buffer, output written into a slice of another:
    # the elements around the slice must stay untouched (NaN).
    merged = randn((rows, 2 * width + pad), dtype, device, 11)[:, : 2 * width]
    out_buffer = poisoned_like(torch.empty(rows, width + pad, dtype=dtype, device=device))
    out = out_buffer[:, 3 : 3 + width]
    ops.gelu_tanh_and_mul(out, merged)
    assert_close(out, gelu_ref(merged[:, :width], "tanh") * merged[:, width:].double(), dtype)
    assert torch.isnan(out_buffer[:, :3]).all() and torch.isnan(out_buffer[:, 3 + width :]).all()

    x = wide_gate[:, pad:]
    out = poisoned_like(torch.empty(rows, width + 1, dtype=dtype, device=device))[:, 1:]
    ops.gelu(out, x)
    assert_close(out, gelu_ref(x, "none"), dtype)


def test_leading_dims_collapse(ops, device):
    """A 3-D column slice x[:, :, :w] is one row stride apart, so it needs no copy."""
    big = randn((2, 3, 40), torch.float32, device, 12)
    gate, up = big[:, :, :16], big[:, :, 20:36]
    assert_close(ops.geglu(gate, up, "none"), gelu_ref(gate, "none") * up.double(), torch.float32)
    # Size-1 dimensions have no say in the layout, whatever their stride.
    gate = randn((4, 1, 32), torch.float32, device, 13).transpose(0, 1)
    assert_close(ops.geglu(gate, gate, "tanh"), gelu_ref(gate, "tanh") * gate.double(), torch.float32)


def test_offsets_past_int32(ops, device):
    """Row offsets beyond 2^31 elements: two rows 2^31 + 64 elements apart.

    Only the touched pages of the 4 GiB buffers are committed on CPU."""
    row_stride, width = 2**31 + 64, 96
    try:
        buffers = [torch.empty(row_stride + width, dtype=torch.bfloat16, device=device) for _ in range(3)]
    except RuntimeError as e:  # no 4 GiB of address space / device memory here
        pytest.skip(f"cannot allocate the 4 GiB buffers: {e}")
    gate, up, out = (b.as_strided((2, width), (row_stride, 1)) for b in buffers)
    gate.copy_(randn((2, width), torch.bfloat16, device, 14))
    up.copy_(randn((2, width), torch.bfloat16, device, 15))
    out.fill_(float("nan"))
    expected = gelu_ref(gate, "tanh") * up.double()
    assert_close(ops.geglu(gate, up, "tanh"), expected, torch.bfloat16)
    ops.gelu_tanh(out, gate)
    assert_close(out, gelu_ref(gate, "tanh"), torch.bfloat16)
    merged = buffers[0].as_strided((2, 2 * (width // 2)), (row_stride, 1))
    out2 = poisoned_like(torch.empty(2, width // 2, dtype=torch.bfloat16, device=device))
    ops.gelu_and_mul(out2, merged)
    h = width // 2
    assert_close(out2, gelu_ref(merged[:, :h], "none") * merged[:, h:].double(), torch.bfloat16)


# --------------------------------------------------------------------------- bad input


def test_unsupported_dtype(ops, device):
    for dtype in (torch.float64, torch.int32):
        x = torch.ones(4, 8, dtype=dtype, device=device)
        with pytest.raises(ERRORS + (TypeError,), match=both("gate", "dtype")):
            ops.geglu(x, x, "tanh")
        with pytest.raises(ERRORS + (TypeError,), match=both("(gate|grad_out)", "dtype")):
            ops.geglu_backward(x, x, x, "tanh")
        with pytest.raises(ERRORS + (TypeError,), match=both("input", "dtype")):
            ops.gelu_and_mul(torch.empty(4, 4, dtype=dtype, device=device), x)
        with pytest.raises(ERRORS + (TypeError,), match=both("input", "dtype")):
            ops.gelu(torch.empty_like(x), x)


def test_bad_approximate(ops, device):
    x = torch.ones(2, 8, device=device)
    for bad in ("exact", "Tanh", ""):
        with pytest.raises(ERRORS, match=both("approximate", "tanh", "none")):
            ops.geglu(x, x, bad)
        with pytest.raises(ERRORS, match=both("approximate", "tanh", "none")):
            ops.geglu_backward(x, x, x, bad)


def test_gate_up_mismatch(ops, device):
    gate = torch.ones(2, 8, device=device)
    with pytest.raises(ERRORS, match=both("up", "shape")):
        ops.geglu(gate, torch.ones(2, 9, device=device), "tanh")
    with pytest.raises(ERRORS, match=both("up", "dtype")):
        ops.geglu(gate, gate.bfloat16(), "tanh")
    with pytest.raises(ERRORS, match=both("up", "shape")):
        ops.geglu_backward(gate, gate, torch.ones(8, 2, device=device), "tanh")
    # grad_out and gate disagree: a message may name either one.
    with pytest.raises(ERRORS, match=both("(grad_out|gate)", "shape")):
        ops.geglu_backward(torch.ones(2, 4, device=device), gate, gate, "tanh")
    with pytest.raises(ERRORS, match=both("grad_out", "dtype")):
        ops.geglu_backward(gate.half(), gate, gate, "tanh")


def test_merged_odd_last_dim(ops, device):
    for op in (ops.gelu_and_mul, ops.gelu_tanh_and_mul):
        with pytest.raises(ERRORS, match=both("input", "even")):
            op(torch.empty(3, 3, device=device), torch.ones(3, 7, device=device))


@pytest.mark.parametrize("op", ["gelu_and_mul", "gelu_tanh_and_mul", "gelu", "gelu_tanh"])
def test_bad_out(ops, device, op):
    fn = getattr(ops, op)
    merged = "and_mul" in op
    x = torch.ones(3, 8, device=device)
    shape = (3, 4) if merged else (3, 8)
    with pytest.raises(ERRORS, match=both("out", "shape")):
        fn(torch.empty(3, 5, device=device), x)
    with pytest.raises(ERRORS, match=both("out", "shape")):
        fn(torch.empty(1, *shape, device=device), x)
    with pytest.raises(ERRORS, match=both("out", "dtype")):
        fn(torch.empty(shape, dtype=torch.bfloat16, device=device), x)
    # An output whose rows overlap (stride 0) cannot be written element by element.
    with pytest.raises(ERRORS, match=both("out", "(overlap|stride)")):
        fn(torch.empty(1, shape[1], device=device).expand(shape), x)


def test_unsupported_strides(ops, device):
    x = torch.ones(8, 6, device=device)
    # Last dimension not contiguous.
    with pytest.raises(ERRORS, match=both("gate", "stride")):
        ops.geglu(x.t(), x.t(), "none")
    with pytest.raises(ERRORS, match=both("input", "stride")):
        ops.gelu_and_mul(torch.empty(6, 4, device=device), x.t())
    with pytest.raises(ERRORS, match=both("out", "stride")):
        ops.gelu(torch.empty(6, 8, device=device).t(), x)
    with pytest.raises(ERRORS, match=both("up", "stride")):
        ops.geglu(x, torch.ones(6, 8, device=device).t(), "none")
    with pytest.raises(ERRORS, match=both("grad_out", "stride")):
        ops.geglu_backward(torch.ones(6, 8, device=device).t(), x, x, "none")
    # Leading dimensions that do not collapse into one row stride.
    y = torch.ones(2, 3, 8, device=device)[:, :2, :]
    with pytest.raises(ERRORS, match=both("gate", "stride")):
        ops.geglu(y, y, "tanh")
    with pytest.raises(ERRORS, match=both("out", "stride")):
        ops.gelu(y, torch.ones(2, 2, 8, device=device))


@pytest.mark.cuda
def test_device_mismatch(request):
    """An argument on the wrong device is refused, whichever variant gets the call."""
    cuda_ops = native_ops(request.getfixturevalue("kernel"))
    x_cpu, x_cuda = torch.ones(2, 8), torch.ones(2, 8, device="cuda")
    with pytest.raises((RuntimeError, ValueError), match="(?i)(device|cuda|cpu)"):
        cuda_ops.gelu(torch.empty_like(x_cuda), x_cpu)
    with pytest.raises((RuntimeError, ValueError), match="(?i)(device|cuda|cpu)"):
        cuda_ops.geglu(x_cuda, x_cpu, "tanh")
    cpu_ops = native_ops(request.getfixturevalue("cpu_kernel"))
    with pytest.raises((RuntimeError, ValueError), match="(?i)(device|cuda|cpu)"):
        cpu_ops.gelu(torch.empty_like(x_cpu), x_cuda)


# --------------------------------------------------------------------------- CPU ISAs

def test_cpu_sources_are_listed_in_build_toml():
    """A CPU kernel file missing from build.toml does not fail the build: its ISA would
    silently fall back to the baseline kernels. The baseline file must link first."""
    import tomllib

    config = tomllib.loads((REPO / "build.toml").read_text())
    (src,) = [k["src"] for k in config["kernel"].values() if k["backend"] == "cpu"]
    cpu_dir = REPO / "geglu_kernels" / "cpu"
    on_disk = {str(p.relative_to(REPO)) for p in cpu_dir.iterdir() if p.suffix in (".cpp", ".h")}
    assert on_disk <= set(src), f"build.toml's CPU kernel src lacks {sorted(on_disk - set(src))}"
    sources = [s for s in src if s.endswith(".cpp")]
    assert sources[0] == "geglu_kernels/cpu/geglu_cpu.cpp", "the baseline file must come first"
    assert sources.index("geglu_kernels/cpu/geglu_cpu_avx2.cpp") < sources.index(
        "geglu_kernels/cpu/geglu_cpu_avx512.cpp"
    )


def test_every_included_header_is_listed_in_build_toml():
    """Each kernel section lists in its src every header of this repository that its
    sources include (directly or through another header), as kernel-builder expects:
    it copies only the listed files into the build."""
    import re
    import tomllib

    config = tomllib.loads((REPO / "build.toml").read_text())
    include = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
    for name, section in config["kernel"].items():
        dirs = [REPO / d for d in section.get("include", [])]
        listed = set(section["src"])
        todo, seen = [REPO / s for s in section["src"]], set()
        while todo:
            path = todo.pop()
            if path in seen:
                continue
            seen.add(path)
            for header in include.findall(path.read_text()):
                found = [d / header for d in [path.parent, *dirs] if (d / header).is_file()]
                if found:  # a header of this repository (others come from torch, CUDA, CUTLASS)
                    rel = str(found[0].resolve().relative_to(REPO))
                    assert rel in listed, f"build.toml's kernel.{name} src lacks {rel} (included by {path.name})"
                    todo.append(found[0])


# The child runs only this package's ops on tensors the parent made (outputs poisoned
# there): under ATEN_CPU_CAPABILITY=avx512 on a CPU without AVX-512, ATen's own kernels
# would take that request at its word and die of SIGILL, while ours must not.
CHILD = textwrap.dedent(
    """
    import os, sys, torch
    from kernels import get_kernel
    os.environ["LOCAL_KERNELS"] = sys.argv[1]
    ops = get_kernel(sys.argv[2], version=1, backend="cpu")._ops.ops
    inputs = torch.load(sys.argv[3])
    results = {"capability": torch.backends.cpu.get_cpu_capability()}
    for key, (g, u, dy, x, outs) in inputs.items():
        for approximate, out in zip(("none", "tanh"), outs):
            (ops.gelu_and_mul if approximate == "none" else ops.gelu_tanh_and_mul)(out, x)
            results[key, approximate] = (
                ops.geglu(g, u, approximate), *ops.geglu_backward(dy, g, u, approximate), out)
    torch.save(results, sys.argv[4])
    """
)

# What this CPU itself can run (cpuinfo, not ATen's possibly overridden choice).
CPU_RUNS = {"default": True, "avx2": torch.cpu._is_avx2_supported(), "avx512": torch.cpu._is_avx512_supported()}


def run_isa_child(capability, tmp_path):
    """Runs CHILD under ATEN_CPU_CAPABILITY=capability; returns (results, inputs)."""
    inputs = {}
    for dtype in DTYPES:
        for width in (5, 37, 4097):
            g, u, dy = (randn((3, width), dtype, "cpu", seed) for seed in (20, 21, 22))
            outs = [torch.full((3, width), float("nan"), dtype=dtype) for _ in range(2)]
            inputs[str(dtype), width] = (g, u, dy, torch.cat([g, u], dim=-1), outs)
    torch.save(inputs, tmp_path / "in.pt")
    env = dict(os.environ, ATEN_CPU_CAPABILITY=capability)
    cmd = [sys.executable, "-c", CHILD, f"{REPO_ID}={REPO}", REPO_ID, tmp_path / "in.pt", tmp_path / "out.pt"]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert res.returncode == 0, f"returncode {res.returncode}: {res.stderr}"
    return torch.load(tmp_path / "out.pt"), inputs


def check_isa_results(results, inputs):
    for (dtype, width), (g, u, dy, _, _) in inputs.items():
        dtype = getattr(torch, dtype.removeprefix("torch."))
        for approximate in APPROXIMATE:
            out, grad_gate, grad_up, merged_out = results[(str(dtype), width), approximate]
            expected = gelu_ref(g, approximate) * u.double()
            assert_close(out, expected, dtype)
            assert_close(merged_out, expected, dtype)
            assert_close(grad_gate, dy.double() * u.double() * gelu_grad_ref(g, approximate), dtype)
            assert_close(grad_up, dy.double() * gelu_ref(g, approximate), dtype)


@pytest.mark.parametrize("capability", ["default", "avx2", "avx512"])
def test_cpu_isa_variants(capability, cpu_kernel, tmp_path):
    """Every compiled instruction-set variant (picked like ATen's, ATEN_CPU_CAPABILITY)."""
    if not CPU_RUNS[capability]:
        pytest.skip(f"this CPU cannot run {capability} code")
    results, inputs = run_isa_child(capability, tmp_path)
    ran = {"no avx": "default"}.get(results["capability"].lower(), results["capability"].lower())
    assert ran == capability, f"ATen ran {results['capability']} when asked for {capability}"
    check_isa_results(results, inputs)


def test_cpu_isa_request_beyond_this_cpu(cpu_kernel, tmp_path):
    """ATEN_CPU_CAPABILITY=avx512 on a CPU without AVX-512: ATen believes it, our kernels
    must not (they cap the request at what the CPU runs) and still compute correctly."""
    if CPU_RUNS["avx512"]:
        pytest.skip("this CPU runs AVX-512: no request beyond it to test")
    results, inputs = run_isa_child("avx512", tmp_path)
    check_isa_results(results, inputs)
