"""Which build variant `kernels` picks, and that the noarch `torch-cuda` variant
(Triton + eager composite, no native module) stands in where no compiled variant fits.

On CPU: variant resolution with explicit system parameters (a CUDA backend object,
torch 2.11 / 2.13) through `kernels.variants._resolve_variant_for_system`, and the
torch-cuda package imported directly (kernels refuses a CUDA variant on a CPU torch)
to check it imports without a GPU and without triton, exposes the compiled variant's
API, and computes through its eager composite on CPU tensors.
On GPU (cuda-marked): get_kernel loads the compiled variant; with the compiled CUDA
variants removed from a copy of build/, it loads torch-cuda, whose geglu runs Triton.
"""

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from packaging.version import Version

from conftest import REPO, REPO_ID

BUILD = REPO / "build"
NOARCH = "torch-cuda"


def _import_package(path: Path, module_name: str):
    """Import build/<variant>/ as a package under `module_name` (no kernels checks)."""
    spec = importlib.util.spec_from_file_location(
        module_name, path / "__init__.py", submodule_search_locations=[str(path)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


# --------------------------------------------------------------------------- resolution


def _resolve(names, backend, torch_version):
    from kernels.variants import _resolve_variant_for_system, parse_variant

    variants = [parse_variant(n) for n in names]
    accepted, _trace = _resolve_variant_for_system(
        variants=variants,
        selected_backend=backend,
        cpu="x86_64",
        os="linux",
        torch_version=Version(torch_version),
        torch_cxx11_abi=True,
        tvm_ffi_version=None,
    )
    return [v.variant_str for v in accepted]


def _built_variants():
    """Variant directories of build/ (the builder keeps scratch space in dot-dirs)."""
    return sorted(p.name for p in BUILD.iterdir() if p.is_dir() and not p.name.startswith("."))


def _names():
    built = _built_variants() if BUILD.is_dir() else []
    extra = [
        "torch211-cxx11-cu130-x86_64-linux",
        "torch213-cxx11-cu130-x86_64-linux",
        "torch213-cxx11-cu126-x86_64-linux",
        "torch211-cxx11-cpu-x86_64-linux",
        "torch213-cxx11-cpu-x86_64-linux",
        "torch-stable-abi210-cpu-x86_64-linux",
        "torch-stable-abi210-cu130-x86_64-linux",
        "torch-stable-abi210-cu126-x86_64-linux",
        NOARCH,
    ]
    return sorted(set(built) | set(extra))


def test_build_dir_variants_parse():
    from kernels.variants import NoarchVariant, parse_variant

    names = _built_variants()
    assert NOARCH in names
    parsed = {n: parse_variant(n) for n in names}
    assert isinstance(parsed[NOARCH], NoarchVariant)
    assert any(not isinstance(v, NoarchVariant) for v in parsed.values()), names


@pytest.mark.parametrize(
    "cuda, torch_version, expected, tied",
    [
        ("13.0", "2.11", "torch-stable-abi210-cu130-x86_64-linux", "torch211-cxx11-cu130-x86_64-linux"),
        ("13.0", "2.13", "torch-stable-abi210-cu130-x86_64-linux", "torch213-cxx11-cu130-x86_64-linux"),
        # minor <= system minor fits
        ("13.2", "2.13", "torch-stable-abi210-cu130-x86_64-linux", "torch213-cxx11-cu130-x86_64-linux"),
        ("12.6", "2.13", "torch-stable-abi210-cu126-x86_64-linux", "torch213-cxx11-cu126-x86_64-linux"),
        # no version-tied build for torch 2.12 or 2.15: the stable-ABI one loads there
        ("13.0", "2.12", "torch-stable-abi210-cu130-x86_64-linux", None),
        ("13.0", "2.15", "torch-stable-abi210-cu130-x86_64-linux", None),
    ],
)
def test_compiled_variant_preferred_over_torch_cuda(cuda, torch_version, expected, tied):
    """The stable-ABI CUDA build (build.toml [torch.stable-abi]) comes first on every torch
    from 2.10 on; a version-tied name of the same build stays for older `kernels`."""
    from kernels.backends import CUDA

    accepted = _resolve(_names(), CUDA(version=Version(cuda)), torch_version)
    assert accepted[0] == expected, accepted
    assert tied is None or tied in accepted, accepted
    assert NOARCH in accepted and accepted.index(NOARCH) > 0


@pytest.mark.parametrize(
    "cuda, torch_version",
    [
        ("13.0", "2.9"),  # below the stable ABI's 2.10, and no version-tied build
        ("12.4", "2.13"),  # older than every compiled toolkit (cu126 needs >= 12.6)
    ],
)
def test_torch_cuda_chosen_when_no_compiled_variant_fits(cuda, torch_version):
    from kernels.backends import CUDA

    accepted = _resolve(_names(), CUDA(version=Version(cuda)), torch_version)
    assert accepted == [NOARCH], accepted


def test_cpu_backend_never_picks_torch_cuda():
    from kernels.backends import CPU

    # The stable-ABI CPU variant (build.toml [torch.stable-abi]) comes first on every
    # torch from 2.10 on; the version-tied name of the same build stays for older kernels.
    stable = "torch-stable-abi210-cpu-x86_64-linux"
    assert _resolve(_names(), CPU(), "2.13")[:2] == [stable, "torch213-cxx11-cpu-x86_64-linux"]
    assert _resolve(_names(), CPU(), "2.15")[0] == stable
    assert _resolve(_names(), CPU(), "2.10")[0] == stable
    assert stable not in _resolve(_names(), CPU(), "2.9")
    assert _resolve([n for n in _names() if n != stable], CPU(), "2.13")[0] == "torch213-cxx11-cpu-x86_64-linux"
    assert NOARCH not in _resolve(_names(), CPU(), "2.13")
    assert NOARCH not in _resolve(_names(), CPU(), "2.12")
    assert not [n for n in _resolve(_names(), CPU(), "2.12") if n.startswith("torch2")]


# --------------------------------------------------------------------------- noarch on CPU


@pytest.fixture(scope="module")
def noarch():
    return _import_package(BUILD / NOARCH, "_geglu_test_noarch_a")


def test_noarch_has_the_compiled_variants_api(noarch, cpu_kernel):
    assert sorted(noarch.__all__) == sorted(cpu_kernel.__all__)
    for name in noarch.__all__:
        assert hasattr(noarch, name), name


def test_noarch_has_no_native_ops_and_registers_triton_ops(noarch):
    act = noarch.activation
    assert act.NATIVE_DEVICE_TYPES == frozenset()
    assert act._backend(torch.empty(1)) == "eager"
    for op in ("_geglu_triton", "_geglu_backward_triton", "_geglu_merged_triton", "_geglu_merged_backward_triton"):
        assert hasattr(act.ops, op), op
    assert not hasattr(act.ops, "geglu")


@pytest.mark.parametrize("approximate", ["tanh", "none"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_noarch_eager_composite_on_cpu(noarch, dtype, approximate):
    gate = (torch.randn(4, 3, 40, dtype=torch.float64) * 3).to(dtype).requires_grad_()
    up = torch.randn(4, 3, 40, dtype=torch.float64).to(dtype).requires_grad_()
    rtol, atol = {torch.float32: (2e-5, 2e-5), torch.bfloat16: (1.6e-2, 2e-3)}[dtype]
    g64, u64 = gate.detach().double().requires_grad_(), up.detach().double().requires_grad_()
    ref = F.gelu(g64, approximate=approximate) * u64
    out = noarch.geglu(gate, up, approximate)
    torch.testing.assert_close(out.double(), ref.detach(), rtol=rtol, atol=atol)
    out.sum().backward()
    ref.sum().backward()
    torch.testing.assert_close(gate.grad.double(), g64.grad, rtol=rtol, atol=atol)
    dy = torch.ones_like(gate)
    grad_gate, grad_up = noarch.geglu_backward(dy, gate.detach(), up.detach(), approximate)
    torch.testing.assert_close(grad_gate.double(), g64.grad, rtol=rtol, atol=atol)
    torch.testing.assert_close(grad_up.double(), u64.grad, rtol=rtol, atol=atol)
    x = torch.cat([gate, up], -1).detach()
    torch.testing.assert_close(noarch.geglu_merged(x, approximate).double(), ref.detach(), rtol=rtol, atol=atol)
    out2 = torch.full_like(gate.detach(), float("nan"))
    noarch.gelu_tanh_and_mul(out2, x)
    torch.testing.assert_close(
        out2.double(), (F.gelu(g64, approximate="tanh") * u64).detach(), rtol=rtol, atol=atol
    )


def test_same_build_imported_twice_reuses_registrations(noarch):
    """A second import of one build (same ops namespace) must not fail on
    'already registered', and both copies work."""
    again = _import_package(BUILD / NOARCH, "_geglu_test_noarch_b")
    assert again.activation.ops is not None
    x = torch.randn(3, 8)
    torch.testing.assert_close(again.geglu_merged(x), noarch.geglu_merged(x))


def test_compat_package_reimports_compiled_variant(cpu_kernel):
    """build/<variant>/geglu/__init__.py (for older kernels releases) imports the
    variant a second time under another module name: same ops namespace, same native
    module; registrations must not clash, and both copies compute (with autograd)."""
    variant = Path(cpu_kernel.__file__).parent
    compat = _import_package(variant / "geglu", "_geglu_test_compat")
    gate = torch.randn(3, 16, requires_grad=True)
    up = torch.randn(3, 16)
    compat.geglu(gate, up).sum().backward()
    g64 = gate.detach().double().requires_grad_()
    (F.gelu(g64, approximate="tanh") * up.double()).sum().backward()
    torch.testing.assert_close(gate.grad.double(), g64.grad, rtol=2e-5, atol=2e-5)
    torch.testing.assert_close(compat.geglu(gate, up), cpu_kernel.geglu(gate, up))


def test_noarch_imports_without_triton():
    """torch-cuda imports on a machine without triton (fresh interpreter, triton hidden)."""
    code = (
        "import sys, importlib.util, torch\n"
        "sys.modules['triton'] = None\n"
        "sys.modules['triton.language'] = None\n"
        f"p = {str(BUILD / NOARCH)!r}\n"
        "spec = importlib.util.spec_from_file_location('_geglu_no_triton', p + '/__init__.py',"
        " submodule_search_locations=[p])\n"
        "m = importlib.util.module_from_spec(spec); sys.modules[spec.name] = m; spec.loader.exec_module(m)\n"
        "assert not m.triton_kernels.activation.HAS_TRITON\n"
        "x = torch.randn(2, 6)\n"
        "torch.testing.assert_close(m.geglu_merged(x, 'none'),"
        " torch.nn.functional.gelu(x[:, :3]) * x[:, 3:])\n"
        "print('ok', sorted(m.__all__))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.startswith("ok")


# --------------------------------------------------------------------------- GPU


@pytest.mark.cuda
def test_get_kernel_loads_compiled_cuda_variant(kernel):
    variant = Path(kernel.__file__).parent.name
    assert "-cu" in variant and variant != NOARCH, variant
    assert "cuda" in kernel.activation.NATIVE_DEVICE_TYPES
    x = torch.randn(16, 512, device="cuda")
    assert kernel.activation._backend(x) == "native"
    torch.testing.assert_close(kernel.geglu_merged(x), F.gelu(x[:, :256], approximate="tanh") * x[:, 256:])


@pytest.mark.cuda
def test_get_kernel_falls_back_to_torch_cuda(tmp_path, monkeypatch):
    """A repository without a compiled variant for this torch/CUDA: get_kernel loads
    torch-cuda and geglu runs through Triton (forward and backward)."""
    from kernels import get_kernel

    (tmp_path / "build").mkdir()
    for name in _built_variants():
        if not re.search(r"-cu\d", name):  # drop the compiled CUDA variants only
            shutil.copytree(BUILD / name, tmp_path / "build" / name, ignore=shutil.ignore_patterns("__pycache__"))
    assert (tmp_path / "build" / NOARCH).is_dir()
    monkeypatch.setenv("LOCAL_KERNELS", f"{REPO_ID}={tmp_path}")
    k = get_kernel(REPO_ID, version=1)
    assert Path(k.__file__).parent.name == NOARCH
    gate = torch.randn(64, 1000, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    up = torch.randn(64, 1000, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    assert k.activation._backend(gate) == "triton"
    out = k.geglu(gate, up, "none")
    g64, u64 = gate.detach().double().requires_grad_(), up.detach().double().requires_grad_()
    ref = F.gelu(g64) * u64
    torch.testing.assert_close(out.double(), ref.detach(), rtol=1.6e-2, atol=2e-3)
    out.sum().backward()
    ref.sum().backward()
    torch.testing.assert_close(gate.grad.double(), g64.grad, rtol=1.6e-2, atol=2e-3)
    torch.testing.assert_close(up.grad.double(), u64.grad, rtol=1.6e-2, atol=2e-3)
    x = torch.randn(8, 2 * 384, device="cuda")
    out2 = torch.full((8, 384), float("nan"), device="cuda")
    k.gelu_tanh_and_mul(out2, x)
    torch.testing.assert_close(out2, F.gelu(x[:, :384], approximate="tanh") * x[:, 384:])


CHILD_GET_KERNEL = "import sys; from kernels import get_kernel; get_kernel(sys.argv[1], version=1)"


@pytest.mark.parametrize("cut", ["half", "last_byte", "empty"])
def test_damaged_native_library_is_an_import_error(tmp_path, cut):
    """A variant whose native library lost its tail (an interrupted download or copy)
    raises an ImportError naming the variant and the file when get_kernel imports it,
    instead of the SIGBUS that opening the file would end the process with."""
    # Every variant's library is cut, so whichever variant get_kernel selects here (the
    # CPU one on a CPU machine, the CUDA one beside a GPU) is damaged.
    damaged = {}
    for variant in (n for n in _built_variants() if list((BUILD / n).glob("*.so"))):
        dest = tmp_path / "build" / variant
        shutil.copytree(BUILD / variant, dest, ignore=shutil.ignore_patterns("__pycache__"))
        (lib,) = dest.glob("*.so")
        data = lib.read_bytes()
        lib.write_bytes(data[: {"half": len(data) // 2, "last_byte": len(data) - 1, "empty": 0}[cut]])
        damaged[variant] = lib.name
    assert damaged, "build/ has no variant with a native library"
    env = {k: v for k, v in __import__("os").environ.items() if k != "LOCAL_KERNELS"}
    env["LOCAL_KERNELS"] = f"{REPO_ID}={tmp_path}"
    res = subprocess.run([sys.executable, "-c", CHILD_GET_KERNEL, REPO_ID], env=env, capture_output=True, text=True)
    assert res.returncode == 1, f"returncode {res.returncode} (negative: killed by a signal): {res.stderr[-2000:]}"
    error = next((line for line in res.stderr.splitlines() if line.startswith("ImportError: geglu:")), None)
    assert error is not None, res.stderr[-2000:]
    assert any(f"{lib} of the variant {variant} is damaged" in error for variant, lib in damaged.items()), error


def test_whole_native_library_passes_the_check():
    """The check reads the real build's headers and finds nothing wrong (so the test
    above fails for the truncation, not for a check that refuses everything)."""
    spec = importlib.util.spec_from_file_location("_geglu_library_check", REPO / "torch-ext/geglu/_library_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    libs = [lib for name in _built_variants() for lib in (BUILD / name).glob("*.so")]
    assert libs, "build/ has no native library"
    for lib in libs:
        assert module._damage(lib) is None, lib
