"""The stable-ABI CPU variant (`torch-stable-abi210-cpu-*`, build.toml [torch.stable-abi])
is one build for every torch from 2.10 on: the build made with the pinned torch (2.13,
this process) loads through `kernels` and computes correctly under PyPI's newest torch
(2.15, a second environment: scripts/setup_torch_new.sh) as well as under this one.

The child resolves the variant as users do (`kernels.get_local_kernel`), checks that it
got the stable-ABI variant, and runs every op of the native module against float64
references, forward and backward, with opcheck on the ops."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "build"

CHILD = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    import torch, kernels
    import torch.nn.functional as F

    k = kernels.get_local_kernel(Path(sys.argv[1]), backend="cpu")
    variant = Path(k.__file__).parent.name
    ops = k._ops.ops
    torch.manual_seed(0)
    out = {"torch": torch.__version__, "variant": variant, "errors": []}

    def close(got, ref, tol):
        err = (got.double() - ref).abs().max().item()
        if not err <= tol * (1 + ref.abs().max().item()):
            out["errors"].append(f"max abs error {err}")

    def gelu64(t, approximate):
        return F.gelu(t.double(), approximate=approximate)

    for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 2e-2)):
        x = torch.randn(7, 96).to(dtype)
        g, u = x[:, :48], x[:, 48:]
        for approximate in ("tanh", "none"):
            close(k.geglu(g, u, approximate), gelu64(g, approximate) * u.double(), tol)
            o = torch.empty(7, 48, dtype=dtype)
            (k.gelu_tanh_and_mul if approximate == "tanh" else k.gelu_and_mul)(o, x)
            close(o, gelu64(g, approximate) * u.double(), tol)
            o = torch.empty_like(x)
            (k.gelu_tanh if approximate == "tanh" else k.gelu)(o, x)
            close(o, gelu64(x, approximate), tol)

    # The per-layer op, inference and training (its autograd registered from Python).
    x = torch.randn(2, 5, 40, dtype=torch.float64).float()
    wg, wu, wd = (torch.randn(s, dtype=torch.float64).float() * 0.2 for s in ((24, 40), (24, 40), (40, 24)))
    bd = torch.randn(40).float()

    def ref(x, wg, wu, wd, bd):
        x, wg, wu, wd, bd = (t.double() for t in (x, wg, wu, wd, bd))
        return F.linear(F.gelu(x @ wg.T, approximate="tanh") * (x @ wu.T), wd, bd) + x

    with torch.no_grad():
        close(k.geglu_mlp(x, wg, wu, wd, biases=(None, None, bd), residual=x), ref(x, wg, wu, wd, bd), 1e-4)
    leaves = [t.clone().requires_grad_() for t in (x, wg, wu, wd, bd)]
    y = k.geglu_mlp(leaves[0], leaves[1], leaves[2], leaves[3], biases=(None, None, leaves[4]), residual=leaves[0])
    y.sum().backward()
    ref_leaves = [t.double().clone().requires_grad_() for t in (x, wg, wu, wd, bd)]
    ref(*ref_leaves).sum().backward()
    for got, want in zip(leaves, ref_leaves):
        close(got.grad, want.grad, 1e-4)
    out["mlp_grad_fn"] = type(y.grad_fn).__name__

    # Every op through torch.library.opcheck (schema, fakes, autograd registration; the
    # training ops carry no autograd: linear._GegluMlpTrain owns it).
    a = torch.randn(4, 32)
    for op, args in (
        (ops.geglu.default, (a[:, :16], a[:, 16:], "tanh")),
        (ops.geglu_backward.default, (a[:, :16], a[:, 16:], a[:, :16], "none")),
        (ops.gelu_and_mul.default, (torch.empty(4, 16), a)),
        (ops.gelu_tanh.default, (torch.empty(4, 32), a)),
        (ops._geglu_mlp.default, (x, wg, wu, wd, None, None, bd, None, "tanh")),
        (ops._geglu_mlp_train.default, (x, wg, wu, wd, None, None, bd, None, "none")),
        (ops._linear_bias_gelu.default, (x, wg, None, "tanh")),
    ):
        torch.library.opcheck(op, args)
    print(json.dumps(out))
    """
)


def stable_variant() -> Path:
    found = sorted(BUILD.glob("torch-stable-abi*-cpu-*"))
    if not found:
        pytest.skip("no stable-ABI CPU variant in build/ (python -m tools.build)")
    return found[0]


def new_torch_python() -> Path | None:
    venv = Path(os.environ.get("GEGLU_NEW_TORCH_VENV", REPO / ".venv-torch-new"))
    py = venv / "bin" / "python"
    return py if py.exists() else None


def run_child(python, tmp_path):
    env = dict(os.environ)
    env.pop("LOCAL_KERNELS", None)
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    res = subprocess.run(
        [str(python), str(script), str(BUILD)], capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path
    )
    assert res.returncode == 0, f"{python}:\n{res.stdout[-3000:]}\n{res.stderr[-6000:]}"
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("which", ["pinned", "newest"])
def test_stable_abi_cpu_variant_under_two_torch_releases(which, tmp_path):
    variant = stable_variant()
    python = Path(sys.executable) if which == "pinned" else new_torch_python()
    if python is None:
        if os.environ.get("GEGLU_REQUIRE_NEW_TORCH"):  # .ci/run sets it
            pytest.fail("no newest-torch environment: bash scripts/setup_torch_new.sh")
        pytest.skip("no newest-torch environment (bash scripts/setup_torch_new.sh)")
    out = run_child(python, tmp_path)
    assert out["variant"] == variant.name, out
    assert not out["errors"], out
    assert "GegluMlpTrain" in out["mlp_grad_fn"], out
    if which == "newest":
        assert out["torch"].split("+")[0] >= "2.15", out
