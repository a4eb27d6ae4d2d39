"""The one-dot gate/up GEMM experiment (tools/triton_one_dot/): its kernels stay
correct against float64 while the product keeps the two-dot kernel, so a GPU bench of
it (tools/triton_one_dot/bench.py) measures a kernel that computes the right thing.
On CPU the kernels run under the Triton interpreter (TRITON_INTERPRET=1, set by
conftest before anything imports triton)."""

import sys

import pytest
import torch

from conftest import HAS_CUDA, REPO

pytest.importorskip("triton")
sys.path.insert(0, str(REPO / "tools" / "triton_one_dot"))
import check_one_dot as check  # noqa: E402
import one_dot_gemm  # noqa: E402


@pytest.fixture(scope="module")
def tg(kernel):
    mod = getattr(kernel.linear, "triton_gemm", None)
    if mod is None:
        pytest.skip("triton is not installed")
    one_dot_gemm.bind(mod)
    return mod


CASES = [  # (M, K, N), dtype, bias, weight layout, GELU
    ((5, 40, 24), torch.float16, "both", "merged", "tanh"),
    ((21, 72, 40), torch.float16 if HAS_CUDA else torch.float32, "gate", "merged-up-first", "none"),
    ((67, 40, 24), torch.bfloat16 if HAS_CUDA else torch.float16, "none", "separate", "tanh"),
]


@pytest.mark.parametrize("split_k", [1, 2])
@pytest.mark.parametrize("b_tile", ["view", "join"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"M{c[0][0]}-K{c[0][1]}-N{c[0][2]}-{str(c[1])[6:]}-{c[3]}")
def test_one_dot_matches_float64(tg, case, b_tile, split_k):
    (m, k, n), dtype, bias, layout, approximate = case
    check.check_case(tg, m, k, n, dtype, bias, layout, approximate, b_tile, split_k, seed=m + n)


def test_one_dot_refuses_weights_of_two_row_strides(tg):
    x, wg, _, _, _ = check.operands(5, 40, 24, torch.float16, "none", "separate", 0)
    wu = torch.empty((24, 48), dtype=torch.float16, device=x.device)[:, :40]
    with pytest.raises(ValueError, match="row stride"):
        one_dot_gemm.geglu_forward_one_dot(x, wg, wu, None, None, "tanh")
