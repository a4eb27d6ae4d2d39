"""Load the local build the way a Hub user does and print what was loaded.

    python -m tools.load_check

`LOCAL_KERNELS` maps `org/geglu` to this checkout, so `get_kernel("org/geglu",
version=1)` resolves build/ exactly as it would resolve the Hub's `v1` branch.
"""

import json
import os
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    os.environ["LOCAL_KERNELS"] = f"org/geglu={REPO}"
    from kernels import get_kernel

    geglu = get_kernel("org/geglu", version=1)
    variant_dir = Path(geglu.__file__).parent
    meta = json.loads((variant_dir / "metadata.json").read_text())
    print(f"loaded   {variant_dir.relative_to(REPO)}")
    print(f"module   {geglu.__name__} (ops namespace torch.ops.{meta['id']})")
    print(f"backend  {meta['backend']}")
    print(f"public   {', '.join(geglu.__all__)}")
    print(f"layers   {', '.join(sorted(geglu.layers.__all__))}")

    device = "cuda" if torch.cuda.is_available() else "cpu"
    gate, up = torch.randn(4, 1000, device=device), torch.randn(4, 1000, device=device)
    out = geglu.geglu(gate, up, approximate="tanh")
    ref = F.gelu(gate.double(), approximate="tanh") * up.double()
    err = ((out.double() - ref).norm() / ref.norm()).item()
    print(f"check    geglu on {device} [4, 1000] float32: relative error {err:.1e}")
    if not err < 1e-5:
        raise SystemExit("load check FAILED: geglu disagrees with the float64 reference")


if __name__ == "__main__":
    main()
