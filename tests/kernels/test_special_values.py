"""geglu and its backward at +-inf, NaN and huge finite values, on every backend.

The reference is float64 on the same (storage-rounded) inputs, and it fixes where a
result is NaN or inf: gelu and its slope at +-inf are 0 * inf (NaN) in float64, as in
eager float32 (gelu(+inf) = +inf, gelu(-inf) = NaN); a NaN anywhere stays NaN. Where
|gate| >= 100 or gate is not finite, gelu and its slope are exact (-0 / x, 0 / 1, or
NaN), so the results there must equal float64's bit for bit (zeros with their sign);
elsewhere the dtype's tolerance. Huge finite gates follow float64, not eager: eager's
float32 tanh backward squares the gate, which overflows past |gate| = 1.8e19 and
gives 0 * inf = NaN there, where the slope is exactly 0 or 1 (and float64 says so).

Backends: the CPU kernels (the instruction set ATen picks here, and every compiled one
in a subprocess under ATEN_CPU_CAPABILITY), CUDA (marked), the Triton kernels (the
interpreter on CPU), and the differentiable torch-op composite that geglu_backward
runs when an argument requires grad.
"""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from conftest import HAS_CUDA, REPO, REPO_ID, STORAGE_TOLERANCE, poisoned_like
from test_native_ops import CPU_RUNS, gelu_grad_ref, gelu_ref, native_ops

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
APPROXIMATE = ["tanh", "none"]
INF, NAN = float("inf"), float("nan")
MODERATE = [-15.5, -12.0, -10.5, -9.5, -4.0, -1.0, -1e-3, -0.0, 0.0, 1e-3, 1.0, 4.0, 9.5, 10.5, 12.0, 15.5]
HUGE = {
    torch.float32: [3e38, 1e20, 1e10, 1e4, 100.0],
    torch.bfloat16: [3e38, 1e20, 1e10, 1e4, 100.0],
    torch.float16: [6e4, 1e4, 1e3, 100.0],
}
EXACT_FROM = 100.0  # |gate| from which gelu and its slope are exact (0 / 1, -0 / x)


def special_inputs(dtype, width=75):
    """(gate, up, dy) of shape [3, width], each row the special gates then fresh random
    values (vector body and scalar tail alike); row 2 also has inf / NaN in up and dy."""
    huge = HUGE[dtype]
    specials = [-INF, *(-h for h in huge), *MODERATE, *reversed(huge), INF, NAN]
    g = torch.Generator().manual_seed(len(specials) + width)
    gate = 3.0 * torch.randn(3, width, generator=g, dtype=torch.float64)
    for row in range(3):
        gate[row, row : row + len(specials)] = torch.tensor(specials, dtype=torch.float64)
    up = 2.0 * torch.randn(3, width, generator=g, dtype=torch.float64)
    dy = torch.randn(3, width, generator=g, dtype=torch.float64)
    up[2, -6:-3] = torch.tensor([INF, -INF, NAN], dtype=torch.float64)
    dy[2, -3:] = torch.tensor([INF, -INF, NAN], dtype=torch.float64)
    return tuple(t.to(dtype) for t in (gate, up, dy))


def expected(gate, up, dy, approximate):
    """(geglu, grad_gate, grad_up) in float64, rounded to the storage dtype."""
    g, u, d = gate.double(), up.double(), dy.double()
    value, slope = gelu_ref(g, approximate), gelu_grad_ref(g, approximate)
    return tuple(t.to(gate.dtype) for t in (value * u, d * u * slope, d * value))


def assert_special(actual, reference, gate, what):
    actual, reference, gate = actual.cpu(), reference.cpu(), gate.cpu()
    assert actual.dtype == reference.dtype and actual.shape == reference.shape, what
    nan_a, nan_e = actual.isnan(), reference.isnan()
    if not torch.equal(nan_a, nan_e):
        i = tuple((nan_a ^ nan_e).nonzero()[0].tolist())
        raise AssertionError(
            f"{what}: NaN where float64 {'is not' if nan_a[i] else 'is'} at {list(i)} (gate "
            f"{gate[i].item()!r}): {actual[i].item()!r} vs {reference[i].item()!r}"
        )
    exact = ~gate.isfinite() | (gate.double().abs() >= EXACT_FROM)
    a, e = actual.double(), reference.double()
    same_bits = (a == e) & (torch.signbit(a) == torch.signbit(e)) | (nan_a & nan_e)
    bad = exact & ~same_bits
    if bad.any():
        i = tuple(bad.nonzero()[0].tolist())
        raise AssertionError(
            f"{what}: {int(bad.sum())} exact results differ from float64, first at {list(i)} "
            f"(gate {gate[i].item()!r}): {actual[i].item()!r} vs {reference[i].item()!r}"
        )
    keep = ~exact & ~nan_e
    torch.testing.assert_close(a[keep], e[keep], **STORAGE_TOLERANCE[actual.dtype], msg=what)


def check_all(results, gate, up, dy, approximate, backend):
    for name, actual, ref in zip(("geglu", "grad_gate", "grad_up"), results, expected(gate, up, dy, approximate)):
        if actual is not None:
            assert_special(actual, ref, gate, f"{backend} {name} ({gate.dtype}, {approximate})")


def test_reference_gives_nan_only_at_the_infinities():
    """The float64 reference itself: NaN slope at +-inf, gelu(-inf) NaN, gelu(inf) inf,
    and exact 0 / 1 slopes at huge finite gates (where eager float32 overflows)."""
    g = torch.tensor([-INF, -3e38, -100.0, 100.0, 3e38, INF], dtype=torch.float32)
    for approximate in APPROXIMATE:
        slope = gelu_grad_ref(g, approximate)
        value = gelu_ref(g, approximate)
        assert slope[0].isnan() and slope[-1].isnan()
        assert slope[1:-1].tolist() == [0.0, 0.0, 1.0, 1.0]
        assert value[0].isnan() and value[-1] == INF


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("approximate", APPROXIMATE)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_native_kernels(cpu_kernel, kernel, device, dtype, approximate):
    ops = native_ops(cpu_kernel if device == "cpu" else kernel)
    gate, up, dy = (t.to(device) for t in special_inputs(dtype))
    results = (ops.geglu(gate, up, approximate), *ops.geglu_backward(dy, gate, up, approximate))
    check_all(results, gate, up, dy, approximate, f"native {device}")


@pytest.mark.parametrize("approximate", APPROXIMATE)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_triton_kernels(kernel, dtype, approximate):
    ta = kernel.triton_kernels.activation
    if not ta.HAS_TRITON:
        pytest.skip("triton is not installed")
    gate, up, dy = (t.to("cuda" if HAS_CUDA else "cpu") for t in special_inputs(dtype))
    out, grad_gate, grad_up = poisoned_like(gate), poisoned_like(gate), poisoned_like(gate)
    ta.geglu_forward(out, gate, up, approximate)
    ta.geglu_backward(grad_gate, grad_up, dy, gate, up, approximate)
    check_all((out, grad_gate, grad_up), gate, up, dy, approximate, "triton")


@pytest.mark.parametrize("approximate", APPROXIMATE)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_differentiable_composite(cpu_kernel, dtype, approximate):
    """geglu_backward with an argument that requires grad runs torch ops (double
    backward); its first-order results follow the same pattern."""
    gate, up, dy = special_inputs(dtype)
    grad_gate, grad_up = cpu_kernel.geglu_backward(dy.requires_grad_(), gate, up, approximate)
    check_all((None, grad_gate.detach(), grad_up.detach()), gate, up, dy.detach(), approximate, "composite")


@pytest.mark.parametrize("approximate", APPROXIMATE)
def test_autograd_of_geglu(cpu_kernel, approximate):
    """The public geglu's autograd backward (the kernels) at the special gates."""
    gate, up, dy = special_inputs(torch.float32)
    g, u = gate.clone().requires_grad_(), up.clone().requires_grad_()
    y = cpu_kernel.geglu(g, u, approximate)
    y.backward(dy)
    check_all((y.detach(), g.grad, u.grad), gate, up, dy, approximate, "geglu autograd")


CHILD = textwrap.dedent(
    """
    import os, sys, torch
    from kernels import get_kernel
    os.environ["LOCAL_KERNELS"] = sys.argv[1]
    ops = get_kernel(sys.argv[2], version=1, backend="cpu")._ops.ops
    results = {"capability": torch.backends.cpu.get_cpu_capability()}
    for key, (g, u, dy) in torch.load(sys.argv[3]).items():
        for approximate in ("none", "tanh"):
            results[key, approximate] = (ops.geglu(g, u, approximate), *ops.geglu_backward(dy, g, u, approximate))
    torch.save(results, sys.argv[4])
    """
)


@pytest.mark.parametrize("capability", ["default", "avx2", "avx512"])
def test_cpu_isa_variants(cpu_kernel, capability, tmp_path):
    if not CPU_RUNS[capability]:
        pytest.skip(f"this CPU cannot run {capability} code")
    inputs = {str(dtype): special_inputs(dtype) for dtype in DTYPES}
    torch.save(inputs, tmp_path / "in.pt")
    env = dict(os.environ, ATEN_CPU_CAPABILITY=capability)
    cmd = [sys.executable, "-c", CHILD, f"{REPO_ID}={REPO}", REPO_ID, tmp_path / "in.pt", tmp_path / "out.pt"]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert res.returncode == 0, f"returncode {res.returncode}: {res.stderr}"
    results = torch.load(tmp_path / "out.pt")
    ran = {"no avx": "default"}.get(results["capability"].lower(), results["capability"].lower())
    assert ran == capability, f"ATen ran {results['capability']} when asked for {capability}"
    for key, (gate, up, dy) in inputs.items():
        for approximate in APPROXIMATE:
            check_all(results[key, approximate], gate, up, dy, approximate, f"cpu {capability}")
