"""Dependencies between the native sources run one way: torch-ext/ (the binding and the
per-layer ops) includes geglu_kernels/, never the reverse. What a backend implements is
declared under geglu_kernels/common/ (activation_ops.h, fused_gemms.h)."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TORCH_EXT_HEADERS = {p.name for p in (REPO / "torch-ext").glob("*.h")}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def test_kernels_include_nothing_from_torch_ext():
    offenders = []
    for path in sorted((REPO / "geglu_kernels").rglob("*")):
        if path.suffix not in {".h", ".cuh", ".cpp", ".cu"}:
            continue
        for name in INCLUDE.findall(path.read_text()):
            if "torch-ext" in name or Path(name).name in TORCH_EXT_HEADERS:
                offenders.append(f"{path.relative_to(REPO)}: #include \"{name}\"")
    assert not offenders, "geglu_kernels/ must not include torch-ext/:\n" + "\n".join(offenders)
