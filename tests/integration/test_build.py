"""The build output is what kernel-builder would upload, and `kernels` loads it."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import REPO, REPO_ID

sys.path.insert(0, str(REPO))
from tools import build as builder  # noqa: E402  (the builder, not the kernel)

BUILD = REPO / "build"
REQUIRED = {"name", "id", "version", "license", "backend", "digest", "python-depends"}


def variants():
    return sorted(p for p in BUILD.iterdir() if p.is_dir() and not p.name.startswith("."))


def run_python(code: str, env_extra: dict, cwd=None) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_KERNELS", "HF_HUB_OFFLINE", "HF_HUB_CACHE")}
    env.update(env_extra)
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=cwd)
    assert res.returncode == 0, f"subprocess failed:\n{res.stdout}\n{res.stderr}"
    return res.stdout


def test_expected_variants_exist():
    names = {v.name for v in variants()}
    here = builder.variant_name("cpu")
    if here not in names and not builder.stable_abi_buildable():
        pytest.skip(f"torch {torch.__version__} cannot build the stable-ABI CPU variant (tools/build.py skips it)")
    assert here in names, f"{here} missing from build/: {names}"
    assert builder.NOARCH_VARIANT in names


@pytest.mark.parametrize("variant", [v.name for v in variants()] if BUILD.is_dir() else [])
def test_variant_is_hub_compliant(variant):
    from kernels_data import Digest, Metadata

    d = BUILD / variant
    raw = json.loads((d / "metadata.json").read_text())
    assert REQUIRED <= raw.keys(), f"missing metadata fields: {REQUIRED - raw.keys()}"
    assert raw["name"] == "geglu" and raw["version"] == 1 and raw["license"] == "Apache-2.0"
    meta = Metadata.read_from_file(d / "metadata.json")
    # The digest covers every shipped file and still matches them.
    meta.digest.validate(Digest.hash_variant(meta.digest.algorithm, d))
    shipped = {str(p.relative_to(d)) for p in d.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    assert set(meta.digest.files) == shipped - {"metadata.json"}
    # Compatibility package for older `kernels` releases.
    assert (d / "geglu" / "__init__.py").is_file()
    ops_py = (d / "_ops.py").read_text()
    assert f"torch.ops.{meta.id}" in ops_py and f'"{meta.id}::' in ops_py
    sos = sorted(d.glob("*.so"))
    if variant == builder.NOARCH_VARIANT:
        assert sos == [] and raw["backend"] == {"type": "cuda"}
        assert f"from . import {meta.id}" not in ops_py
    else:
        assert [s.name for s in sos] == [f"{meta.id}.abi3.so"]
        assert meta.id.startswith(f"_geglu_{raw['backend']['type']}_")
        assert builder.check_abi(sos[0]) == []
        if raw["backend"]["type"] == "cuda":
            assert raw["backend"]["archs"], "CUDA metadata must list archs"


def test_get_kernel_via_local_kernels(kernel):
    meta = json.loads((Path(kernel.__file__).parent / "metadata.json").read_text())
    assert kernel.__name__ == meta["id"]
    assert "layers" in kernel.__all__
    for name in kernel.__all__:
        assert hasattr(kernel, name), f"__all__ names {name}, which the module lacks"
    expected = "cuda" if torch.version.cuda else "cpu"
    assert meta["backend"]["type"] == expected


def test_compat_package_reexports_public_api(kernel):
    compat = Path(kernel.__file__).parent / "geglu" / "__init__.py"
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('geglu_compat_probe', {str(compat)!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "print(sorted(m.__all__))\n"
    )
    out = run_python(code, {})
    assert out.strip() == str(sorted(kernel.__all__))


def test_offline_hf_cache(tmp_path):
    """An air-gapped user: HF_HUB_OFFLINE=1 and a cache holding refs/v1."""
    cfg = builder.read_config(REPO)
    staged = [v.name for v in variants()]
    snapshot = builder.stage_cache(cfg, BUILD, tmp_path, staged)
    ref = tmp_path / "kernels--org--geglu" / "refs" / "v1"
    assert ref.read_text() == snapshot.name
    code = (
        "import kernels, torch\n"
        f"m = kernels.get_kernel({REPO_ID!r}, version=1)\n"
        "print(m.__file__)\n"
        "print('layers' in m.__all__)\n"
    )
    out = run_python(code, {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path)}).split()
    assert out[-2].startswith(str(snapshot)), out
    assert out[-1] == "True"


def _has_history() -> bool:
    res = subprocess.run(["git", "ls-files", "tools/build.py"], cwd=REPO, capture_output=True, text=True)
    return res.returncode == 0 and bool(res.stdout.strip())


@pytest.mark.skipif(not _has_history(), reason="needs the git history of this checkout (absent from device copies)")
@pytest.mark.skipif(not builder.stable_abi_buildable(), reason="this torch cannot build the stable-ABI CPU variant")
def test_two_builds_of_different_commits_load_side_by_side(tmp_path):
    """Unique op namespaces let two versions of the kernel live in one process."""
    clone = tmp_path / "other"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    (clone / "ANOTHER_COMMIT").write_text("a second commit changes the tree hash\n")
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@example.com"]
    subprocess.run(git + ["add", "ANOTHER_COMMIT"], cwd=clone, check=True)
    subprocess.run(git + ["commit", "-qm", "another commit"], cwd=clone, check=True)
    res = subprocess.run(
        [sys.executable, "-m", "tools.build", "--backend", "cpu", "--no-noarch", "--skip-load-check", "--work",
         str(tmp_path / "work")],  # fmt: skip
        cwd=clone,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    code = (
        "import kernels, torch\nfrom pathlib import Path\n"
        f"a = kernels.get_local_kernel(Path({str(BUILD)!r}), backend='cpu')\n"
        f"b = kernels.get_local_kernel(Path({str(clone / 'build')!r}), backend='cpu')\n"
        "assert a.__name__ != b.__name__, (a.__name__, b.__name__)\n"
        "g, u = torch.randn(5, 33), torch.randn(5, 33)\n"
        "ref = torch.nn.functional.gelu(g.double(), approximate='tanh') * u.double()\n"
        "for m in (a, b):\n"
        "    torch.testing.assert_close(m.geglu(g, u).double(), ref, rtol=1e-5, atol=1e-6)\n"
        "print(a.__name__, b.__name__)\n"
    )
    names = run_python(code, {}).split()
    assert len(set(names)) == 2


@pytest.mark.parametrize(
    "version, ok", [("2.11.0+cu130", False), ("2.12.1", False), ("2.13.0+cpu", True), ("2.15.0", True), ("3.0.0", True)]
)
def test_stable_abi_build_needs_new_enough_torch_headers(version, ok):
    """The builder skips the stable-ABI variant (with a log line) on a torch whose
    headers cannot compile its sources, instead of failing deep in the compiler."""
    assert builder.stable_abi_buildable(version) is ok
