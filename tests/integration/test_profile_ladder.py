"""benchmarks/profile_mlp_ladder.py on CPU: the post's ladder at a small shape, once,
read back from its JSON summary and Chrome traces.

What it proves is the counting, not a time: eager is the post's 5 ops (3 linears, GELU,
mul), torch.compile fuses GELU * mul into one Inductor kernel beside the 3 GEMMs, and
both geglu rungs (get_kernel's geglu_mlp and the kernelized module) are one native op
per forward, with fewer dispatcher ops than eager; each trace holds exactly one forward.
Also the kernel-name labels of the plot on real CUDA kernel names (no GPU needed).
"""

import contextlib
import io
import json
import sys

import pytest
import torch

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

from plot_kernel_lanes import short_kernel_name  # noqa: E402
from profile_mlp_ladder import main  # noqa: E402


@pytest.fixture(scope="module")
def ladder_run(tmp_path_factory):
    """One run of the whole ladder (and the off-Hopper rungs) on CPU: exit code, summary,
    output folder, printed output."""
    out = tmp_path_factory.mktemp("ladder")
    capture = pytest.MonkeyPatch()
    # Inductor's compile cache in the test's folder: a cold compile, as CI has.
    capture.setenv("TORCHINDUCTOR_CACHE_DIR", str(out / "inductor"))
    argv = [
        "--device", "cpu", "--tokens", "64", "--dim", "64", "--hidden", "128", "--dtype", "float32",
        "--reps", "3", "--without-sm90",
        "--json", str(out / "ladder.json"), "--trace-dir", str(out / "traces"), "--plot", str(out / "ladder.png"),
    ]  # fmt: skip
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            rc = main(argv)
    finally:
        capture.undo()
    summary = json.loads((out / "ladder.json").read_text())
    return rc, summary, out, printed.getvalue()


def _rung(summary, name):
    return next(r for r in summary["rungs"] if r["name"] == name)


def _lane(rung):
    """The rung's compute ops of one forward, namespaces dropped."""
    return [ev["name"].split("::")[-1] for ev in rung["one_forward"]]


def test_every_rung_matches_eager(ladder_run):
    rc, summary, _, _ = ladder_run
    assert rc == 0
    for rung in summary["rungs"]:
        if rung["status"] == "ran":
            assert rung["rel_err_vs_eager"] < 1e-3, rung["name"]


def test_summary_records_setup(ladder_run):
    _, summary, _, _ = ladder_run
    assert summary["schedule"] == {"wait": 1, "warmup": 1, "active": 3}
    assert summary["shape"] == {"x": [64, 64], "tokens": 64, "dim": 64, "hidden": 128, "dtype": "float32"}
    for key in ("device", "torch", "kernels", "triton", "date", "variant"):
        assert key in summary


def test_eager_is_the_posts_five_ops(ladder_run):
    _, summary, _, _ = ladder_run
    eager = _rung(summary, "eager")
    assert eager["kernels_per_forward"] == 5
    assert sorted(_lane(eager)) == ["gelu", "linear", "linear", "linear", "mul"]


def test_compile_fuses_gelu_and_mul(ladder_run):
    _, summary, _, _ = ladder_run
    compiled = _rung(summary, "torch.compile")
    lane = _lane(compiled)
    assert compiled["kernels_per_forward"] == 4
    assert lane.count("mm") == 3
    assert [n for n in lane if n != "mm"][0].endswith("cpp_fused_gelu_mul_0")


def test_liger_is_skipped_with_a_reason_on_cpu(ladder_run):
    _, summary, _, _ = ladder_run
    liger = _rung(summary, "liger")
    assert liger["status"] == "skipped" and liger["reason"]


@pytest.mark.parametrize("name", ["geglu_mlp", "kernelized"])
def test_geglu_rung_is_one_native_op(ladder_run, name):
    if name == "kernelized" and torch.cuda.is_available():
        pytest.skip("kernelize's LocalLayerRepository loads the CUDA variant on a CUDA torch: no native CPU op")
    _, summary, _, _ = ladder_run
    rung, eager = _rung(summary, name), _rung(summary, "eager")
    assert rung["status"] == "ran"
    assert _lane(rung) == ["_geglu_mlp"]
    assert rung["kernels_per_forward"] == 1
    assert rung["ops"]["ours"] == 1
    assert rung["ops"]["total"] < eager["ops"]["total"]


def test_without_sm90_rungs(ladder_run):
    """The rebuilt off-Hopper fallback is 2 GEMMs into [gate | up], the geglu kernel, the
    down GEMM; the Triton GEMM rung needs CUDA and says so."""
    _, summary, _, _ = ladder_run
    assert _lane(_rung(summary, "geglu_mlp fallback, no sm90")) == ["mm", "mm", "geglu", "linear"]
    triton = _rung(summary, "triton gate/up, no sm90")
    assert triton["status"] == "skipped" and "CUDA" in triton["reason"]


def test_each_trace_holds_one_forward(ladder_run):
    _, summary, out, _ = ladder_run
    ran = [r for r in summary["rungs"] if r["status"] == "ran"]
    assert len(list((out / "traces").glob("*.json"))) == len(ran)
    events = json.loads((out / "traces" / "geglu_mlp.json").read_text())["traceEvents"]
    names = [e["name"] for e in events if e.get("ph") == "X"]
    assert sum(n.startswith("ProfilerStep#") for n in names) == 1
    assert sum(n.endswith("::_geglu_mlp") for n in names) == 1


def test_plot_is_written_or_skipped_with_a_note(ladder_run):
    _, _, out, printed = ladder_run
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "plot skipped: matplotlib is not installed" in printed
        assert not (out / "ladder.png").exists()
    else:
        assert (out / "ladder.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize(
    "name, label",
    [
        ("nvjet_sm90_tst_128x160_64x5_2x4_h_bz_NTT", "cuBLAS GEMM"),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_cublas", "cuBLAS GEMM"),
        ("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, int>, "
         "geglu_sm90::GegluMainloopSm90<...>>>(...)", "geglu GEMM (sm90)"),
        ("void geglu_cuda::(anonymous namespace)::rowwise_kernel<__nv_bfloat16, geglu_cuda::GegluTanh>(...)",
         "geglu kernel"),
        ("_geglu_tma_kernel", "geglu GEMM (Triton)"),
        ("_geglu_tanh_forward_kernel", "Liger geglu"),
        ("triton_poi_fused_gelu_mul_0", "inductor gelu_mul"),
        ("triton_poi_fused__unsafe_view_gelu_mul_0", "inductor gelu_mul"),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl("
         "at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}>(int, ...)", "aten gelu"),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<c10::BFloat16, "
         "c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> > >(int, ...)", "aten mul"),
        ("_geglu_cuda_abc123::_geglu_mlp", "_geglu_mlp"),
    ],
)  # fmt: skip
def test_short_kernel_names(name, label):
    assert short_kernel_name(name) == label
