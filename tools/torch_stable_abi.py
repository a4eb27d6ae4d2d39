"""Check a native module against torch's stable ABI, as kernel-builder's
`check-abi --torch-stable-abi` does (kernel-abi-check's torch_stable_abi module; the
kernel-abi-check wheel pinned here, 0.14.1, predates it).

A module built for stable ABI X.Y may reference, from libtorch:
  * C shim functions (torch/csrc/stable/c/shim.h, torch/csrc/inductor/aoti_torch/c/shim.h
    and the generated c_shim_*.h) that exist in torch X.Y: a shim newer than X.Y is a
    violation. Versions come from torch's own headers, which declare each newer shim
    inside `#if TORCH_FEATURE_VERSION >= TORCH_VERSION_A_B_0`;
  * C++ symbols of torch::stable (header-only wrappers compiled into the module).
Any other undefined C++ symbol in the namespaces c10::, at:: or torch:: is libtorch's
version-tied C++ API, a violation.

    python -m tools.torch_stable_abi build/<variant>/<ops>.abi3.so 2.10
"""

from __future__ import annotations

import re
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

_GUARD = re.compile(r"#if\s+TORCH_FEATURE_VERSION\s*>=\s*TORCH_VERSION_(\d+)_(\d+)_\d+")
_DECL = re.compile(r"\b((?:aoti_torch|torch)_[A-Za-z0-9_]+)\s*\(")


def _version(v: str) -> tuple[int, int]:
    major, minor = v.split(".")[:2]
    return int(major), int(minor)


@lru_cache(maxsize=None)
def shim_versions() -> dict[str, tuple[int, int]]:
    """C shim function -> the torch release that added it, for shims added in 2.10 or
    later (older ones are absent: every stable-ABI target has them)."""
    import torch

    include = Path(torch.__file__).parent / "include" / "torch"
    headers = [include / "csrc" / "stable" / "c" / "shim.h", include / "csrc" / "inductor" / "aoti_torch" / "c" / "shim.h"]
    headers += sorted((include / "csrc" / "inductor" / "aoti_torch" / "generated").glob("c_shim_*.h"))
    versions: dict[str, tuple[int, int]] = {}
    for header in headers:
        if not header.is_file():
            continue
        stack: list[tuple[int, int] | None] = []
        for line in header.read_text().splitlines():
            stripped = line.strip()
            m = _GUARD.match(stripped)
            if m:
                stack.append((int(m.group(1)), int(m.group(2))))
                continue
            if stripped.startswith("#if"):
                stack.append(None)
                continue
            if stripped.startswith("#endif") and stack:
                stack.pop()
                continue
            added = max((v for v in stack if v is not None), default=None)
            if added is None:
                continue
            for name in _DECL.findall(line):
                versions.setdefault(name, added)
    return versions


def undefined_symbols(so: Path) -> list[tuple[str, str]]:
    """(mangled, demangled) undefined dynamic symbols of `so`."""
    raw = subprocess.run(["nm", "-D", "--undefined-only", str(so)], check=True, capture_output=True, text=True).stdout
    names = [line.split()[-1].split("@")[0] for line in raw.splitlines() if line.strip()]
    demangled = subprocess.run(["c++filt"], input="\n".join(names), check=True, capture_output=True, text=True).stdout
    return list(zip(names, demangled.splitlines()))


def check_torch_stable_abi(so: Path, target: str) -> list[str]:
    """Violations of torch's stable ABI `target` ("2.10") by the module `so`."""
    want = _version(target)
    shims = shim_versions()
    problems = []
    for mangled, name in undefined_symbols(Path(so)):
        if mangled in shims:
            if shims[mangled] > want:
                problems.append(f"{mangled}: added in torch {shims[mangled][0]}.{shims[mangled][1]}")
            continue
        if name.startswith("torch::stable::"):
            continue
        if name.startswith(("c10::", "at::", "torch::")):
            problems.append(f"non-stable libtorch symbol {name}")
    return problems


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    so, target = Path(argv[0]), argv[1]
    problems = check_torch_stable_abi(so, target)
    for p in problems:
        print(f"[torch-stable-abi] {p}", file=sys.stderr)
    print(f"[torch-stable-abi] {so.name}: {len(problems)} violation(s) of torch's stable ABI {target}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
