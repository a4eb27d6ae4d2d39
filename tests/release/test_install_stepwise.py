"""scripts/install_stepwise.py, which CI uses to install a CUDA torch without its wheels
all on disk at once: the order of its pip calls and which requirements it leaves out."""

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "install_stepwise.py"

# Requires-Dist of PyPI's torch 2.13.0 (CUDA 13.0), as importlib.metadata returns them.
TORCH_REQUIRES = [
    "filelock",
    "typing-extensions>=4.10.0",
    "Jinja2",
    'cuda-toolkit[cublas,cudart]==13.0.3; platform_system == "Linux"',
    'nvidia-cudnn-cu13==9.20.0.48; platform_system == "Linux"',
    'triton==3.7.1; platform_system == "Linux" and python_version < "3.15"',
    'optree>=0.13.0; extra == "optree"',
]


@pytest.fixture
def stepwise():
    spec = importlib.util.spec_from_file_location("install_stepwise", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "requirement, name",
    [
        ("filelock", "filelock"),
        ("Jinja2", "jinja2"),
        ("typing_extensions>=4.10.0", "typing-extensions"),
        ('cuda-toolkit[cublas,cudart]==13.0.3; platform_system == "Linux"', "cuda-toolkit"),
        ('triton==3.7.1; platform_system == "Linux"', "triton"),
        ("numpy ~= 2.0", "numpy"),
    ],
)
def test_dist_name(stepwise, requirement, name):
    assert stepwise.dist_name(requirement) == name


def test_pip_calls_torch_alone_then_each_requirement_then_the_rest(stepwise, monkeypatch):
    calls = []
    monkeypatch.setattr(stepwise, "pip", lambda *args: calls.append(args))
    monkeypatch.setattr(stepwise.importlib.metadata, "requires", lambda name: TORCH_REQUIRES if name == "torch" else None)
    monkeypatch.setattr("sys.argv", ["install_stepwise.py", "--skip", "Triton", "torch==2.13.0", "ninja", "numpy"])
    stepwise.main()
    kept = [r for r in TORCH_REQUIRES if "extra ==" not in r and not r.startswith("triton")]
    assert calls == [("--no-deps", "torch==2.13.0"), *[(r,) for r in kept], ("ninja", "numpy")]


def test_a_failing_step_exits_naming_it(stepwise, monkeypatch):
    monkeypatch.setattr(stepwise.subprocess, "run", lambda cmd: type("Done", (), {"returncode": 1})())
    with pytest.raises(SystemExit, match="could not install --no-deps torch==2.13.0"):
        stepwise.pip("--no-deps", "torch==2.13.0")
