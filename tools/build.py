"""Local variant builder: what kernel-builder would upload, for the torch running here.

    python -m tools.build                     # build/<variant>/ (+ build/torch-cuda/)
    python -m tools.build --stage-cache DIR   # also stage into a Hugging Face cache

kernel-builder (Nix) builds every variant of the release matrix in a sandbox; this
builder produces the one variant that the running torch can load, with the same
layout: the abi3 native module `_geglu_<backend>_<uid>.abi3.so`, a generated
`_ops.py`, the Python package from `torch-ext/geglu/`, the `geglu/` compatibility
package, and `metadata.json` with a `kernels-data` digest. It then checks the
module with `kernel-abi-check` and imports the variant through `kernels`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PY_LIMITED_API = "0x03090000"  # abi3 for Python 3.9, as kernel-builder targets
ABI3_PYTHON = "3.9"
MANYLINUX = "manylinux_2_28"
# Emitted beside every compiled variant: the Triton-only build for any CUDA torch.
NOARCH_VARIANT = "torch-cuda"


def log(msg: str) -> None:
    print(f"[build] {msg}", flush=True)


# The oldest torch whose headers compile the stable-ABI sources (torch-ext/,
# geglu_kernels/cpu/): 2.11's lack STABLE_TORCH_ERROR_CODE_CHECK and their sleef.h
# refuses TORCH_TARGET_VERSION (seen on the lent GPU machines); 2.13, CI's, builds them.
# What it builds loads on every torch from the `[torch.stable-abi]` target (2.10) on.
STABLE_ABI_MIN_BUILD_TORCH = (2, 13)


def stable_abi_buildable(torch_version: str | None = None) -> bool:
    """Whether this torch (or `torch_version`) can compile the stable-ABI sources."""
    if torch_version is None:
        import torch

        torch_version = torch.__version__
    major, minor = (int(p) for p in torch_version.split("+")[0].split(".")[:2])
    return (major, minor) >= STABLE_ABI_MIN_BUILD_TORCH


class BuildError(RuntimeError):
    pass


# --------------------------------------------------------------------------- config


@dataclass
class KernelSection:
    name: str
    backend: str
    src: list[str]
    cuda_capabilities: list[str] = field(default_factory=list)
    cuda_flags: list[str] = field(default_factory=list)
    cxx_flags: list[str] = field(default_factory=list)
    include: list[str] = field(default_factory=list)
    depends: list[str] = field(default_factory=list)


@dataclass
class BuildConfig:
    name: str
    version: int
    license: str
    backends: list[str]
    repo_id: str
    torch_src: list[str]
    kernels: list[KernelSection]
    # `[torch.stable-abi]`: backend -> the torch version ("2.10") its build targets
    # through torch's stable ABI; backends not listed are version-tied.
    stable_abi: dict[str, str] = field(default_factory=dict)

    @property
    def python_name(self) -> str:
        return self.name.replace("-", "_")


def read_config(src: Path) -> BuildConfig:
    with open(src / "build.toml", "rb") as f:
        raw = tomllib.load(f)
    general = raw["general"]
    if general.get("edition") != 5:
        raise BuildError("build.toml: [general] edition must be 5")
    kernels = [
        KernelSection(
            name=name,
            backend=sec["backend"],
            src=sec["src"],
            cuda_capabilities=sec.get("cuda-capabilities", []),
            cuda_flags=sec.get("cuda-flags", []),
            cxx_flags=sec.get("cxx-flags", []),
            include=sec.get("include", []),
            depends=sec.get("depends", []),
        )
        for name, sec in raw.get("kernel", {}).items()
    ]
    for k in kernels:
        if k.backend not in general["backends"]:
            raise BuildError(f"build.toml: kernel.{k.name} has backend {k.backend!r}, not in general.backends")
        for s in k.src:
            if not (src / s).is_file():
                raise BuildError(f"build.toml: kernel.{k.name} lists {s}, which does not exist")
    return BuildConfig(
        name=general["name"],
        version=general["version"],
        license=general["license"],
        backends=general["backends"],
        repo_id=general["hub"]["repo-id"],
        torch_src=raw["torch"]["src"],
        kernels=kernels,
        stable_abi={b: v for b, v in raw["torch"].get("stable-abi", {}).items() if b in general["backends"]},
    )


# --------------------------------------------------------------------------- identity


def git_dirty(src: Path) -> bool | None:
    """Whether tracked files have uncommitted changes; None outside git."""
    try:
        return bool(
            subprocess.run(
                ["git", "status", "--porcelain", "--untracked-files=no"],
                cwd=src, check=True, capture_output=True, text=True,
            ).stdout.strip()
        )
    except (subprocess.CalledProcessError, FileNotFoundError):
        return None


def git_uid(src: Path) -> str:
    """7 hex digits of the tree hash of HEAD, `_dirty` appended for uncommitted work;
    a random base32 id outside git (as kernel-builder does)."""
    try:
        tree = subprocess.run(
            ["git", "rev-parse", "--short=7", "HEAD^{tree}"], cwd=src, check=True, capture_output=True, text=True
        ).stdout.strip()
    except (subprocess.CalledProcessError, FileNotFoundError):
        import secrets

        return "".join(secrets.choice("abcdefghijklmnopqrstuvwxyz234567") for _ in range(7))
    return tree + ("_dirty" if git_dirty(src) else "")


def git_commit(src: Path) -> str | None:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=src, check=True, capture_output=True, text=True
        ).stdout.strip()
    except (subprocess.CalledProcessError, FileNotFoundError):
        return None


def torch_backend() -> str:
    """`cuXYZ` for a CUDA build of torch, `cpu` otherwise."""
    import torch

    if torch.version.cuda:
        major, minor = torch.version.cuda.split(".")[:2]
        return f"cu{major}{minor}"
    return "cpu"


def variant_name(backend_tag: str, stable_abi: str | None = None) -> str:
    """The variant this machine builds for `backend_tag` ("cpu", "cu130"): version-tied
    (`torch213-cxx11-...`), or `torch-stable-abi210-...` for a stable-ABI target."""
    plat = f"{platform.machine()}-{platform.system().lower()}"
    if stable_abi:
        return f"{stable_abi_tag(stable_abi)}-{backend_tag}-{plat}"
    import torch

    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    abi = "cxx11" if torch.compiled_with_cxx11_abi() else "cxx98"
    return f"torch{major}{minor}-{abi}-{backend_tag}-{plat}"


def stable_abi_tag(version: str) -> str:
    """"2.10" -> "torch-stable-abi210" (kernel-builder's and kernels' spelling)."""
    major, minor = version.split(".")[:2]
    return f"torch-stable-abi{major}{minor}"


def torch_target_version(version: str) -> str:
    """TORCH_TARGET_VERSION for a stable-ABI target, as torch/headeronly/version.h
    defines it: ((major << 56) | (minor << 48)), e.g. "2.10" -> 0x020a000000000000."""
    major, minor = (int(p) for p in version.split(".")[:2])
    return f"0x{(major << 56) | (minor << 48):016x}"


# --------------------------------------------------------------------------- compile


def registration_header(gen_dir: Path) -> None:
    """kernel-builder generates this header; the binding includes it. Written only when
    its text changes, so ninja does not rebuild the binding on every run."""
    path = gen_dir / "registration.h"
    text = (
        """#pragma once
// Generated by tools/build.py (kernel-builder generates the same macros).
#include <Python.h>

#define _CONCAT(A, B) A##B
#define CONCAT(A, B) _CONCAT(A, B)
#define _STRINGIFY(A) #A
#define STRINGIFY(A) _STRINGIFY(A)

#define TORCH_LIBRARY_EXPAND(NAME, MODULE) TORCH_LIBRARY(NAME, MODULE)
#define STABLE_TORCH_LIBRARY_EXPAND(NAME, MODULE) STABLE_TORCH_LIBRARY(NAME, MODULE)
#define STABLE_TORCH_LIBRARY_IMPL_EXPAND(NAME, DEVICE, MODULE) \\
  STABLE_TORCH_LIBRARY_IMPL(NAME, DEVICE, MODULE)

// An abi3 module with no Python-visible functions: the ops live in torch.ops.
#define REGISTER_EXTENSION(NAME)                                                 \\
  PyMODINIT_FUNC CONCAT(PyInit_, NAME)() {                                       \\
    static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, STRINGIFY(NAME),  \\
                                        nullptr, 0, nullptr};                    \\
    return PyModule_Create(&module);                                             \\
  }
"""
    )
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def nvcc_path() -> str | None:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home and (Path(home) / "bin" / "nvcc").exists():
        return str(Path(home) / "bin" / "nvcc")
    return shutil.which("nvcc")


def gencode_flags(capabilities: list[str]) -> list[str]:
    """`9.0a` -> `-gencode=arch=compute_90a,code=sm_90a`; `+PTX` also embeds PTX."""
    flags = []
    for cap in capabilities:
        ptx = cap.endswith("+PTX")
        num = cap.removesuffix("+PTX").replace(".", "")
        flags.append(f"-gencode=arch=compute_{num},code=sm_{num}")
        if ptx:
            flags.append(f"-gencode=arch=compute_{num},code=compute_{num}")
    return flags


def supported_capabilities(nvcc: str, wanted: list[str]) -> list[str]:
    """The intersection of build.toml's capabilities with what this nvcc can target."""
    out = subprocess.run([nvcc, "--list-gpu-arch"], check=True, capture_output=True, text=True).stdout.split()
    have = {a.removeprefix("compute_") for a in out}
    return [c for c in wanted if c.removesuffix("+PTX").replace(".", "").rstrip("af") in have]


def cutlass_version(include: Path) -> str:
    """"major.minor.patch" of the CUTLASS headers under include/ (cutlass/version.h)."""
    text = (include / "cutlass" / "version.h").read_text()
    parts = [re.search(rf"#define CUTLASS_{p}\s+(\d+)", text) for p in ("MAJOR", "MINOR", "PATCH")]
    if not all(parts):
        raise BuildError(f"{include}/cutlass/version.h: no CUTLASS_MAJOR/MINOR/PATCH")
    return ".".join(m.group(1) for m in parts)


_NOTED_CUTLASS: set[str] = set()  # dependencies whose wheel-version note was printed


def dependency_includes(kernel: KernelSection) -> list[str]:
    """Include directories of a section's C++ dependencies. kernel-builder's Nix builds
    take `cutlass_<major>_<minor>` from nixpkgs. Here: the headers under
    $CUTLASS_PATH/include when set (a checkout of the release build.toml names; its
    version must be the one named), otherwise those of the `nvidia-cutlass` wheel
    pinned in requirements.txt (cutlass_library/source/include), whose version may
    differ from the release's: the build says so (docs/BUILDING.md)."""
    dirs = []
    for dep in kernel.depends:
        if dep == "torch":
            continue
        if not re.fullmatch(r"cutlass_\d+_\d+", dep):
            raise BuildError(f"build.toml: kernel.{kernel.name} depends on {dep!r}, which this builder cannot provide")
        wanted = dep.removeprefix("cutlass_").replace("_", ".")
        if os.environ.get("CUTLASS_PATH"):
            include = Path(os.environ["CUTLASS_PATH"]) / "include"
            if not (include / "cute" / "tensor.hpp").is_file():
                raise BuildError(f"CUTLASS_PATH={os.environ['CUTLASS_PATH']}: no include/cute/tensor.hpp there")
            have = cutlass_version(include)
            if not have.startswith(wanted + "."):
                raise BuildError(
                    f"build.toml: kernel.{kernel.name} depends on {dep}, but CUTLASS_PATH holds CUTLASS {have}"
                )
        else:
            spec = importlib.util.find_spec("cutlass_library")
            include = Path(spec.origin).parent / "source" / "include" if spec and spec.origin else None
            if include is None or not (include / "cute" / "tensor.hpp").is_file():
                raise BuildError(
                    f"build.toml: kernel.{kernel.name} depends on {dep}: set CUTLASS_PATH to a CUTLASS {wanted} "
                    "checkout, or install the nvidia-cutlass wheel (pinned in requirements.txt) for its headers"
                )
            have = cutlass_version(include)
            if not have.startswith(wanted + ".") and dep not in _NOTED_CUTLASS:
                _NOTED_CUTLASS.add(dep)
                print(
                    f"build: kernel.{kernel.name}: CUTLASS {have} headers (nvidia-cutlass wheel); the release "
                    f"build takes {dep}: set CUTLASS_PATH to build with those",
                    file=sys.stderr,
                )
        dirs.append(str(include))
    return dirs


def cuda_object_command(kernel: KernelSection, src: str, obj: Path, capabilities: list[str]) -> list[str]:
    """The nvcc command that compiles one .cu of an extra CUDA section (see
    compile_cuda_objects) to an object; tools/nvcc_check.py runs the same one."""
    flags = [
        "-O3", "-DNDEBUG", "-std=c++17", "--expt-relaxed-constexpr", "-Xcompiler=-fPIC", "-Xcompiler=-fno-gnu-unique",
        f"--pre-include={REPO / 'tools' / 'glibc_compat.h'}", *gencode_flags(capabilities), *kernel.cuda_flags,
    ]  # fmt: skip
    if os.environ.get("CC"):
        flags = ["-ccbin", os.environ["CC"], *flags]
    includes = [f"-I{REPO / i}" for i in kernel.include] + [f"-I{d}" for d in dependency_includes(kernel)]
    return [nvcc_path(), "-c", str(REPO / src), "-o", str(obj), *flags, *includes]


def compile_cuda_objects(kernel: KernelSection, work: Path, capabilities: list[str], verbose: bool) -> list[Path]:
    """Object files of an extra CUDA section, each .cu compiled with nvcc for that
    section's own capabilities (kernel-builder builds every section for its own
    cuda-capabilities; cpp_extension.load takes one set for the whole module). The
    sources of such a section are plain CUDA C++ with a C ABI: no torch headers."""
    objects = []
    work.mkdir(parents=True, exist_ok=True)
    newest_input = max((REPO / s).stat().st_mtime for s in kernel.src)
    for src in kernel.src:
        if not src.endswith(".cu"):
            continue
        obj = work / f"{Path(src).stem}.o"
        cmd = cuda_object_command(kernel, src, obj, capabilities)
        # The command beside the object: new flags or capabilities recompile it, as
        # newer sources do (ninja does the same for the module's own sources).
        stamp = obj.with_suffix(".cmd")
        stale = not obj.exists() or obj.stat().st_mtime < newest_input
        if stale or not stamp.exists() or stamp.read_text() != " ".join(cmd):
            log(f"  nvcc {src} for {capabilities}")
            res = subprocess.run(cmd, capture_output=not verbose, text=True)
            if res.returncode != 0:
                raise BuildError(f"nvcc failed on {src}:\n{res.stderr if not verbose else ''}")
            stamp.write_text(" ".join(cmd))
        objects.append(obj)
    return objects


def compile_module(
    cfg: BuildConfig,
    kernel: KernelSection,
    ops_name: str,
    work: Path,
    capabilities: list[str],
    verbose: bool,
    extra_objects: list[Path] = (),
    stable_abi: str | None = None,
) -> Path:
    """Build the native module with torch.utils.cpp_extension (ninja, incremental);
    `extra_objects` (other sections' objects) are linked into it. `stable_abi` ("2.10"):
    compile against torch's stable ABI of that release (TORCH_TARGET_VERSION hides
    every newer stable API), as kernel-builder does for `[torch.stable-abi]`."""
    from torch.utils import cpp_extension

    gen_dir = work / "generated"
    gen_dir.mkdir(parents=True, exist_ok=True)
    registration_header(gen_dir)
    sources = [str(REPO / s) for s in cfg.torch_src + kernel.src if s.endswith((".cpp", ".cc", ".cu"))]
    # tools/glibc_compat.{h,cpp} keep the module within manylinux_2_28 on a new glibc.
    sources.append(str(REPO / "tools" / "glibc_compat.cpp"))
    compat_header = str(REPO / "tools" / "glibc_compat.h")
    define = "CUDA_KERNEL" if kernel.backend == "cuda" else "CPU_KERNEL"
    # cpp_extension defines TORCH_API_INCLUDE_EXTENSION_H, which makes torch/torch.h
    # pull in pybind11 (not abi3); kernel-builder does not define it, nor do we.
    common = [
        f"-DPy_LIMITED_API={PY_LIMITED_API}",
        "-UTORCH_API_INCLUDE_EXTENSION_H",
        f"-D{define}",
        "-fno-gnu-unique",
        "-include",
        compat_header,
    ]
    if stable_abi:
        common.append(f"-DTORCH_TARGET_VERSION={torch_target_version(stable_abi)}")
    # The C++ standard comes from cpp_extension, matching the running torch's headers.
    cflags = ["-O3", *common, *kernel.cxx_flags]
    cuda_cflags = [
        "-O3",
        f"-DPy_LIMITED_API={PY_LIMITED_API}",
        "-UTORCH_API_INCLUDE_EXTENSION_H",
        f"-D{define}",
        *([f"-DTORCH_TARGET_VERSION={torch_target_version(stable_abi)}"] if stable_abi else []),
        "-Xcompiler=-fno-gnu-unique",
        f"--pre-include={compat_header}",
        "--expt-relaxed-constexpr",
        *gencode_flags(capabilities),
        *kernel.cuda_flags,
    ]
    include = [str(gen_dir), str(REPO / "torch-ext")] + [str(REPO / i) for i in kernel.include]
    include += dependency_includes(kernel)
    build_dir = work / "ninja"
    build_dir.mkdir(parents=True, exist_ok=True)
    built = build_dir / f"{ops_name}.so"
    # ninja links only when its own inputs change: relink when an extra object did.
    if built.exists() and any(o.stat().st_mtime > built.stat().st_mtime for o in extra_objects):
        built.unlink()
    cpp_extension.load(
        name=ops_name,
        sources=sources,
        extra_cflags=cflags,
        extra_cuda_cflags=cuda_cflags,
        extra_include_paths=include,
        extra_ldflags=[str(o) for o in extra_objects],
        build_directory=str(build_dir),
        verbose=verbose,
        with_cuda=kernel.backend == "cuda",
        is_python_module=False,
    )
    if not built.exists():
        raise BuildError(f"cpp_extension did not produce {built}")
    return built


def check_abi(so: Path, stable_abi: str | None = None) -> list[str]:
    """Violations of abi3 (Python 3.9) and manylinux_2_28, as kernel-builder checks them,
    and for a stable-ABI build those of torch's stable ABI (tools/torch_stable_abi.py)."""
    from kernel_abi_check import ObjectFile

    obj = ObjectFile(str(so))
    problems = [f"abi3: {v!r}" for v in obj.check_python_abi(ABI3_PYTHON)]
    problems += [f"{MANYLINUX}: {v.name} ({v.dep} {v.version})" for v in obj.check_manylinux(MANYLINUX)]
    if stable_abi:
        from tools.torch_stable_abi import check_torch_stable_abi

        problems += [f"torch stable ABI {stable_abi}: {v}" for v in check_torch_stable_abi(so, stable_abi)]
    return problems


# --------------------------------------------------------------------------- assemble

OPS_PY_ARCH = '''import torch
from . import {ops_name}
ops = torch.ops.{ops_name}


def add_op_namespace_prefix(op_name: str):
    """
    Prefix op by namespace.
    """
    return f"{ops_name}::{{op_name}}"
'''

OPS_PY_NOARCH = '''import torch
ops = torch.ops.{ops_name}


def add_op_namespace_prefix(op_name: str):
    """
    Prefix op by namespace.
    """
    return f"{ops_name}::{{op_name}}"
'''

# Older `kernels` releases import build/<variant>/<name>/__init__.py; this package
# loads the variant's real __init__.py (one directory up) under a module name unique
# to its path and re-exports its public names.
COMPAT_INIT = '''import ctypes
import importlib.util
import sys
from pathlib import Path


def _import_variant(file_path: Path):
    module_name = "_geglu_compat_{:x}".format(ctypes.c_size_t(hash(str(file_path.resolve()))).value)
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, file_path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


_variant = _import_variant(Path(__file__).parent.parent / "__init__.py")
__all__ = list(_variant.__all__)
globals().update({name: getattr(_variant, name) for name in __all__})
'''


def copy_python_package(cfg: BuildConfig, dest: Path) -> list[str]:
    pkg = REPO / "torch-ext" / cfg.python_name
    copied = []
    for path in sorted(pkg.rglob("*.py")):
        rel = path.relative_to(pkg)
        if rel.name == "_ops.py" or "__pycache__" in rel.parts:
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest / rel)
        copied.append(str(rel))
    return copied


def write_metadata(cfg: BuildConfig, dest: Path, ops_name: str, backend: dict) -> None:
    from kernels_data import Digest, DigestAlgorithm, Metadata

    digest = Digest.hash_variant(DigestAlgorithm.SHA256, dest)
    commit = git_commit(REPO)
    metadata = {
        "name": cfg.name,
        "id": ops_name,
        "version": cfg.version,
        "license": cfg.license,
        "python-depends": [],
        "backend": backend,
        "digest": {"algorithm": "sha256", "files": dict(sorted(digest.files.items()))},
        "provenance": {
            "kernel-builder": {"version": "geglu-tools-build"},
            "kernel": {"commit": commit, "dirty": bool(git_dirty(REPO))} if commit else None,
        },
    }
    if metadata["provenance"]["kernel"] is None:
        del metadata["provenance"]["kernel"]
    path = dest / "metadata.json"
    path.write_text(json.dumps(metadata, indent=2) + "\n")
    # Parse it with both the reference structures and the loader's own copy.
    Metadata.read_from_file(path)
    from kernels._rust import Metadata as LoaderMetadata

    LoaderMetadata.read_from_file(path)


def verify_digest(dest: Path) -> None:
    from kernels_data import Digest, Metadata

    meta = Metadata.read_from_file(dest / "metadata.json")
    meta.digest.validate(Digest.hash_variant(meta.digest.algorithm, dest))


def assemble(
    cfg: BuildConfig, dest: Path, ops_name: str, so: Path | None, backend: dict
) -> None:
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    copy_python_package(cfg, dest)
    if so is not None:
        shutil.copy2(so, dest / f"{ops_name}.abi3.so")
        (dest / "_ops.py").write_text(OPS_PY_ARCH.format(ops_name=ops_name))
    else:
        (dest / "_ops.py").write_text(OPS_PY_NOARCH.format(ops_name=ops_name))
    compat = dest / cfg.python_name
    compat.mkdir()
    (compat / "__init__.py").write_text(COMPAT_INIT)
    write_metadata(cfg, dest, ops_name, backend)


# --------------------------------------------------------------------------- load check


def check_loads(out_root: Path, variant: str, backend: str | None) -> str:
    """Import the variant the way users do and return a one-line description."""
    script = (
        "import sys, kernels; from pathlib import Path\n"
        f"m = kernels.get_local_kernel(Path({str(out_root)!r}), backend={backend!r})\n"
        "assert hasattr(m, 'layers') and 'layers' in m.__all__, 'layers missing from __all__'\n"
        "print(m.__name__, len(m.__all__), 'public names; file', Path(m.__file__).parent.name)\n"
    )
    env = dict(os.environ)
    env.pop("LOCAL_KERNELS", None)
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    if res.returncode != 0:
        raise BuildError(f"variant {variant} does not load through kernels:\n{res.stdout}{res.stderr}")
    line = res.stdout.strip().splitlines()[-1]
    if Path(line.split()[-1]).name != variant:
        raise BuildError(f"kernels resolved another variant than {variant}: {line}")
    return line


# --------------------------------------------------------------------------- HF cache


def stage_cache(cfg: BuildConfig, out_root: Path, cache: Path, variants: list[str]) -> Path:
    """Lay the build out as a Hugging Face cache of the repo's `v<version>` branch.

    `HF_HUB_OFFLINE=1 HF_HUB_CACHE=<cache> get_kernel(repo_id, version=N)` then loads
    it as an air-gapped user would. The snapshot id is a hash of the staged files."""
    import hashlib

    from kernels_data import Metadata

    h = hashlib.sha1()
    for v in sorted(variants):
        meta = Metadata.read_from_file(out_root / v / "metadata.json")
        for rel, digest in sorted(meta.digest.files.items()):
            h.update(f"{v}/{rel}:{digest}\n".encode())
    commit = h.hexdigest()
    repo_dir = cache / ("kernels--" + cfg.repo_id.replace("/", "--"))
    snapshot = repo_dir / "snapshots" / commit
    if snapshot.exists():
        shutil.rmtree(snapshot)
    for v in variants:
        shutil.copytree(out_root / v, snapshot / "build" / v, ignore=shutil.ignore_patterns("__pycache__"))
    (repo_dir / "refs").mkdir(parents=True, exist_ok=True)
    (repo_dir / "refs" / f"v{cfg.version}").write_text(commit)
    return snapshot


# --------------------------------------------------------------------------- main


def tree_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def build_arch_variant(
    cfg: BuildConfig,
    sections: list[KernelSection],
    uid: str,
    nvcc: str | None,
    out_root: Path,
    work_root: Path,
    verbose: bool,
) -> str:
    """Compile, ABI-check and assemble build/<variant>/ from the kernel sections of one
    backend: the first through cpp_extension with the torch binding, the others (CUDA
    sections with capabilities of their own) as objects linked into the same module."""
    kernel, extra = sections[0], sections[1:]
    if extra and kernel.backend != "cuda":
        raise BuildError(f"build.toml: one {kernel.backend} kernel section per backend, got {len(sections)}")
    stable_abi = cfg.stable_abi.get(kernel.backend)
    variant = variant_name(torch_backend() if kernel.backend == "cuda" else "cpu", stable_abi)
    ops_name = f"_{cfg.python_name}_{kernel.backend}_{uid}"
    capabilities: list[str] = []
    archs: set[str] = set()
    objects: list[Path] = []
    if kernel.backend == "cuda":
        capabilities = _capabilities(nvcc, kernel)
        archs.update(capabilities)
        for sec in extra:
            caps = _capabilities(nvcc, sec)
            archs.update(caps)
            t = time.time()
            objects += compile_cuda_objects(sec, work_root / variant / "objects" / sec.name, caps, verbose)
            log(f"  kernel.{sec.name} ({', '.join(caps)}) compiled in {time.time() - t:.1f}s")
    log(f"compile kernel.{kernel.name} -> {variant}/{ops_name}.abi3.so")
    t = time.time()
    so = compile_module(cfg, kernel, ops_name, work_root / variant, capabilities, verbose, objects, stable_abi)
    log(f"  compiled in {time.time() - t:.1f}s")

    problems = check_abi(so, stable_abi)
    if problems:
        raise BuildError("kernel-abi-check found violations:\n  " + "\n  ".join(problems))
    log(
        f"  kernel-abi-check: abi3 (Python {ABI3_PYTHON}) and {MANYLINUX} clean"
        + (f"; torch stable ABI {stable_abi} clean" if stable_abi else "")
    )

    backend_meta: dict = {"type": kernel.backend}
    if kernel.backend == "cuda":
        backend_meta["archs"] = sorted(archs)
    assemble(cfg, out_root / variant, ops_name, so, backend_meta)
    verify_digest(out_root / variant)
    return variant


def alias_variant(out_root: Path, stable_variant: str, alias: str) -> None:
    """build/<alias>/ as a copy of a stable-ABI variant: the version-tied name a
    published release carried before, for `kernels` releases that do not know stable-ABI
    variants (tools/variants.py, BUILDER_ALIAS). The files, hence the digest, are the same."""
    dest = out_root / alias
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(out_root / stable_variant, dest, ignore=shutil.ignore_patterns("__pycache__"))
    verify_digest(dest)


def _capabilities(nvcc: str, kernel: KernelSection) -> list[str]:
    caps = supported_capabilities(nvcc, kernel.cuda_capabilities)
    dropped = sorted(set(kernel.cuda_capabilities) - set(caps))
    if dropped:
        log(f"nvcc cannot target {dropped} for kernel.{kernel.name}; building {caps}")
    return caps


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=REPO / "build", help="output root (default: build/)")
    ap.add_argument("--work", type=Path, default=REPO / ".cache" / "build", help="compile cache (default: .cache/build)")
    ap.add_argument("--uid", default=None, help="override the namespace uid (default: git tree hash)")
    ap.add_argument("--backend", action="append", choices=["cpu", "cuda"], help="restrict to these backends")
    ap.add_argument("--no-noarch", action="store_true", help="skip the torch-cuda (Triton-only) variant")
    ap.add_argument("--stage-cache", type=Path, default=None, help="also stage the build into this HF cache dir")
    ap.add_argument("--skip-load-check", action="store_true", help="do not import the result through kernels")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)

    t0 = time.time()
    # One build at a time per work dir: concurrent builds would race on build/.
    import fcntl

    args.work.mkdir(parents=True, exist_ok=True)
    lock = open(args.work / "build.lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    cfg = read_config(REPO)
    uid = args.uid or git_uid(REPO)
    out_root: Path = args.out.resolve()
    work_root = args.work.resolve()
    tag = torch_backend()
    backend = "cuda" if tag.startswith("cu") else "cpu"
    log(f"kernel {cfg.name} v{cfg.version}; torch {__import__('torch').__version__} ({tag}); uid {uid}")

    nvcc = nvcc_path()
    # CPU kernels build on any torch; CUDA kernels need a CUDA torch and nvcc.
    buildable = {"cpu"}
    if backend == "cuda":
        if nvcc is None:
            raise BuildError("torch is a CUDA build but nvcc was not found (set CUDA_HOME)")
        buildable.add("cuda")
    built = []
    aliases: set[str] = set()
    by_backend: dict[str, list[KernelSection]] = {}
    for kernel in cfg.kernels:
        by_backend.setdefault(kernel.backend, []).append(kernel)
    for kernel_backend, sections in by_backend.items():
        names = ", ".join(f"kernel.{k.name}" for k in sections)
        if args.backend and kernel_backend not in args.backend:
            log(f"skip {names} (backend {kernel_backend}): not requested")
            continue
        if kernel_backend not in buildable:
            why = "running torch is a CPU build" if kernel_backend == "cuda" else "no local toolchain for it"
            log(f"skip {names} (backend {kernel_backend}): {why}; the Nix matrix builds it")
            continue
        if kernel_backend in cfg.stable_abi and not stable_abi_buildable():
            need = ".".join(map(str, STABLE_ABI_MIN_BUILD_TORCH))
            log(f"skip {names} (backend {kernel_backend}, torch stable ABI): its sources need torch >= {need} "
                f"headers to compile; a build made with one loads on this torch")
            continue
        variant = build_arch_variant(cfg, sections, uid, nvcc, out_root, work_root, args.verbose)
        built.append(variant)
        if kernel_backend in cfg.stable_abi:
            alias = variant_name(torch_backend() if kernel_backend == "cuda" else "cpu")
            alias_variant(out_root, variant, alias)
            log(f"  {alias}: a copy of {variant} (the version-tied name of earlier releases)")
            built.append(alias)
            aliases.add(alias)

    if not args.no_noarch and "cuda" in cfg.backends:
        noarch_ops = f"_{cfg.python_name}_triton_{uid}"
        assemble(cfg, out_root / NOARCH_VARIANT, noarch_ops, None, {"type": "cuda"})
        verify_digest(out_root / NOARCH_VARIANT)
        built.append(NOARCH_VARIANT)
    log("  digests verified with kernels-data")

    if not args.skip_load_check:
        for v in built:
            # Aliases are the same files under a name kernels ranks below the stable one.
            if v != NOARCH_VARIANT and v not in aliases:
                log(f"  {v} loads through kernels: {check_loads(out_root, v, 'cpu' if '-cpu-' in v else None)}")

    if args.stage_cache:
        snap = stage_cache(cfg, out_root, args.stage_cache.resolve(), built)
        log(f"staged HF cache: {snap} (refs/v{cfg.version})")

    print()
    print(f"{'variant':<40} {'files':>5} {'size':>10}")
    for v in built:
        d = out_root / v
        n = sum(1 for p in d.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
        print(f"{v:<40} {n:>5} {tree_size(d) / 1024:>8.1f}KB")
    print(f"checks: abi3 {ABI3_PYTHON} + {MANYLINUX}" + (" + torch stable ABI" if cfg.stable_abi else "") + " ok, digest ok" + ("" if args.skip_load_check else ", get_local_kernel ok"))
    print(f"done in {time.time() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BuildError as e:
        print(f"[build] ERROR: {e}", file=sys.stderr)
        sys.exit(1)
