"""docs/REQUIREMENTS.md's "Pinning in a downstream project", run as a downstream user runs it.

A downstream project (pyproject.toml with `[tool.kernels.dependencies] "org/geglu" = 1`)
against this build laid out as the HF cache of org/geglu (tools.build's stage_cache), in
which the `v1` branch has moved on from the commit the user pinned: `revision=<commit>`
loads exactly that commit through `get_kernel` and `LayerRepository`, offline, and a
commit missing from the cache raises instead of loading another. `kernels lock` (kernels
0.17.2) cannot lock org/geglu: it checks publisher trust with trust_remote_code=False and
no allow-list, offline it cannot ask, and it needs the Hub's branch and file lists.

Every scenario runs in a fresh subprocess (huggingface_hub reads HF_HUB_OFFLINE at import,
and each load must find its own snapshot, not a module this process already holds) whose
sitecustomize refuses and records any internet socket: nothing reaches the network. The
one "online" scenario answers huggingface_hub's HTTP client from a mock transport.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import REPO, REPO_ID

sys.path.insert(0, str(REPO))
from tools.build import read_config, stage_cache  # noqa: E402  (the builder's --stage-cache layout)

REFUSED = "test_pinning: network access refused"

SITECUSTOMIZE = f'''
import os, socket

def _refuse(what):
    with open(os.environ["PINNING_NET_LOG"], "a") as f:
        f.write(what + "\\n")
    raise OSError({REFUSED!r} + ": " + what)

_connect, _connect_ex = socket.socket.connect, socket.socket.connect_ex

def connect(self, address):
    if self.family in (socket.AF_INET, socket.AF_INET6):
        _refuse(f"connect {{address}}")
    return _connect(self, address)

def connect_ex(self, address):
    if self.family in (socket.AF_INET, socket.AF_INET6):
        _refuse(f"connect_ex {{address}}")
    return _connect_ex(self, address)

def getaddrinfo(host, *args, **kwargs):
    _refuse(f"getaddrinfo {{host}}")

socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo = connect, connect_ex, getaddrinfo
'''

PYPROJECT = """\
[project]
name = "downstream"
version = "0.1.0"

[tool.kernels.dependencies]
"org/geglu" = 1
"""


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> dict:
    """The downstream project, the socket guard and the staged HF cache: `pinned` is the
    commit the user pinned; v1 has since moved on to `head` (a second snapshot)."""
    build = REPO / "build"
    if not build.is_dir():
        raise RuntimeError("build/ is missing: run `python -m tools.build` first")
    root = tmp_path_factory.mktemp("pinning")
    variants = sorted(p.name for p in build.iterdir() if (p / "metadata.json").is_file())
    pinned_snapshot = stage_cache(read_config(REPO), build, root / "cache", variants)
    repo_dir = pinned_snapshot.parent.parent
    assert repo_dir.name == "kernels--org--geglu"
    pinned = pinned_snapshot.name
    assert (repo_dir / "refs" / "v1").read_text() == pinned
    head = hashlib.sha1(b"v1 moved on").hexdigest()
    shutil.copytree(pinned_snapshot, repo_dir / "snapshots" / head)
    (repo_dir / "refs" / "v1").write_text(head)

    (root / "guard").mkdir()
    (root / "guard" / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (root / "downstream").mkdir()
    (root / "downstream" / "pyproject.toml").write_text(PYPROJECT)
    return {"root": root, "cache": root / "cache", "project": root / "downstream", "pinned": pinned, "head": head}


def run(setup, argv, *, offline=True, env_extra=None, network_tried=False):
    """argv in the downstream project, HF_HUB_CACHE on the staged cache, sockets refused
    (and any attempt recorded: a failure, as an error may be caught and reworded)."""
    net_log = setup["root"] / "net.log"
    net_log.unlink(missing_ok=True)
    drop = ("LOCAL_KERNELS", "KERNELS_CACHE", "HF_HUB_OFFLINE", "HF_HUB_CACHE", "HF_HOME", "PYTHONPATH")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    # The guard's sitecustomize first; a PYTHONPATH of installed packages (the GPU run's
    # carried wheels) kept after it.
    paths = [str(setup["root"] / "guard"), *filter(None, [os.environ.get("PYTHONPATH")])]
    env.update(
        PYTHONPATH=os.pathsep.join(paths),
        PINNING_NET_LOG=str(net_log),
        HF_HOME=str(setup["root"] / "hf_home"),
        HF_HUB_CACHE=str(setup["cache"]),
        HF_HUB_DISABLE_TELEMETRY="1",
        PINNED=setup["pinned"],
        **({"HF_HUB_OFFLINE": "1"} if offline else {}),
        **(env_extra or {}),
    )
    res = subprocess.run(argv, cwd=setup["project"], env=env, capture_output=True, text=True, timeout=120)
    assert net_log.exists() == network_tried, res.stderr + (net_log.read_text() if net_log.exists() else "")
    return res


def run_python(setup, code, **kw):
    res = run(setup, [sys.executable, "-c", textwrap.dedent(code)], **kw)
    assert res.returncode == 0, res.stdout + res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_the_guard_refuses_the_network(setup):
    code = "import socket; socket.create_connection(('huggingface.co', 443))"
    res = run(setup, [sys.executable, "-c", code], network_tried=True)
    assert res.returncode != 0 and REFUSED in res.stderr


# --------------------------------------------------------------------------- what works


def test_readme_commit_lookup(setup):
    """The docs' offline lookup: a `version=1` load's file lies in the HF cache
    snapshot of the commit it loaded (here the branch head)."""
    out = run_python(
        setup,
        """
        import json
        from pathlib import Path
        from kernels import get_kernel

        geglu = get_kernel("org/geglu", version=1, trust_remote_code=["org/geglu"])
        print(json.dumps({"commit": Path(geglu.__file__).parents[2].name}))
        """,
    )
    assert out["commit"] == setup["head"]


KERNEL_CHECK = """
import json, os
from pathlib import Path
import torch
import torch.nn.functional as F
from kernels import get_kernel

COMMIT = os.environ["PINNED"]
geglu = get_kernel("org/geglu", revision=COMMIT, trust_remote_code=["org/geglu"])
device = "cuda" if torch.cuda.is_available() else "cpu"
gate, up = torch.randn(2, 8, 64, device=device, dtype=torch.float64).unbind(0)
h = geglu.geglu(gate.float(), up.float(), approximate="tanh")
err = (h.double() - F.gelu(gate, approximate="tanh") * up).abs().max().item()
print(json.dumps({"file": geglu.__file__, "err": err}))
"""


def test_get_kernel_pinned_to_a_commit(setup):
    """get_kernel(revision=COMMIT) loads that commit's snapshot, not v1's head."""
    out = run_python(setup, KERNEL_CHECK)
    path = Path(out["file"])
    assert path.parents[2] == setup["cache"] / "kernels--org--geglu" / "snapshots" / setup["pinned"]
    assert out["err"] < 1e-5


LAYER_CHECK = """
import json, os, sys
import torch
from torch import nn
from kernels import LayerRepository, Mode, kernelize, use_kernel_forward_from_hub, use_kernel_mapping

COMMIT = os.environ["PINNED"]


@use_kernel_forward_from_hub("GeGLUMLP")
class MLP(nn.Module):
    def __init__(self, dim=64, hidden=128):
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)
        self.act_fn = nn.GELU(approximate="tanh")

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.Sequential(MLP()).to(device).eval()
x = torch.randn(8, 64, device=device)
with torch.no_grad():
    ref = model(x)
mapping = {
    "GeGLUMLP": {
        device: LayerRepository("org/geglu", layer_name="GeGLUMLP", revision=COMMIT, trust_remote_code=["org/geglu"])
    }
}
with use_kernel_mapping(mapping, inherit_mapping=False):
    kernelize(model, mode=Mode.INFERENCE, device=device)
forward = model[0].forward.__func__
with torch.no_grad():
    out = model(x)
print(json.dumps({
    "layer": forward.__qualname__,
    "file": sys.modules[forward.__module__].__file__,
    "err": ((out - ref).abs().max() / ref.abs().max()).item(),
}))
"""


def test_layer_repository_pinned_to_a_commit(setup):
    """LayerRepository(revision=COMMIT) in a kernel mapping: kernelize swaps in that
    commit's GeGLUMLP, and the model computes what it computed before."""
    out = run_python(setup, LAYER_CHECK)
    assert out["layer"] == "GeGLUMLP.forward"
    assert Path(out["file"]).parents[2] == setup["cache"] / "kernels--org--geglu" / "snapshots" / setup["pinned"]
    assert out["err"] < 1e-4


def test_a_commit_missing_from_the_cache_raises(setup):
    """Offline, a pinned commit the cache lacks is an error, not another commit."""
    out = run_python(
        setup,
        """
        import json
        from kernels import get_kernel

        try:
            get_kernel("org/geglu", revision="0" * 40, trust_remote_code=["org/geglu"])
        except FileNotFoundError as e:
            print(json.dumps({"error": str(e)}))
        else:
            print(json.dumps({"error": None}))
        """,
    )
    assert out["error"] and out["error"].startswith(
        f"Cannot find a local snapshot for org/geglu (revision: {'0' * 40})"
    ), out


# --------------------------------------------------------------------------- what does not


@pytest.fixture
def kernels_cli():
    """The `kernels` command of this environment (the pinned requirements install it);
    skipped, saying so, where kernels' CLI cannot run (a GPU machine given the wheels
    without their entry points or its CLI's native dependencies)."""
    cli = Path(sys.executable).parent / "kernels"
    probe = subprocess.run([sys.executable, "-c", "import kernels.cli"], capture_output=True, text=True)
    if not cli.exists() or probe.returncode != 0:
        pytest.skip(f"kernels' CLI is not installed here ({cli}): {probe.stderr.strip().splitlines()[-1:]}")
    return cli


def test_kernels_lock_fails_offline(setup, kernels_cli):
    """`kernels lock .`, offline: it asks the Hub whether the publisher is trusted
    (trust_remote_code=False, no allow-list), cannot, and writes no kernels.lock."""
    res = run(setup, [str(kernels_cli), "lock", "."])
    assert res.returncode != 0
    assert (
        "ValueError: Kernel repository 'org/geglu' could not verify publisher trust status. "
        "Set trust_remote_code=True or add the repository ID to the trust_remote_code allowlist"
    ) in res.stderr, res.stderr
    assert "Cannot reach https://huggingface.co/api/organizations/org/overview" in res.stderr
    assert not (setup["project"] / "kernels.lock").exists()


def test_kernels_lock_offline_needs_the_hub_even_for_a_trusted_publisher(setup, kernels_cli):
    """With the trust check passed (as for a trusted publisher), offline locking next
    lists the repo's branches on the Hub."""
    res = run(
        setup,
        [
            sys.executable,
            "-c",
            "import sys, kernels.locking as locking\n"
            "locking._check_trust_remote_code = lambda **kw: None\n"
            "sys.argv = ['kernels', 'lock', '.']\n"
            "from kernels.cli import main\n"
            "main()\n",
        ],
    )
    assert res.returncode != 0
    assert "OfflineModeIsEnabled: Cannot reach https://huggingface.co/api/kernels/org/geglu/refs" in res.stderr, res.stderr
    assert not (setup["project"] / "kernels.lock").exists()


MOCK_HUB = """
import json, os, sys
import httpx2
import huggingface_hub

PINNED = os.environ["PINNED"]
requests = []


def answer(request):
    requests.append(request.url.path)
    if request.url.path == "/api/organizations/org/overview":  # an org the Hub does not mark trusted
        return httpx2.Response(200, json={"name": "org", "fullname": "org"})
    if request.url.path == "/api/kernels/org/geglu/refs":
        return httpx2.Response(200, json={
            "branches": [{"name": "main", "ref": "refs/heads/main", "targetCommit": "1" * 40},
                         {"name": "v1", "ref": "refs/heads/v1", "targetCommit": PINNED}],
            "tags": [], "converts": [],
        })
    return httpx2.Response(404, json={"error": "not mocked"})


huggingface_hub.set_client_factory(lambda: httpx2.Client(transport=httpx2.MockTransport(answer)))
result = {}

# The docs' lookup of the commit.
from huggingface_hub import HfApi
result["v1"] = [b.target_commit for b in HfApi().list_repo_refs("org/geglu", repo_type="kernel").branches
                if b.name == "v1"]
requests.clear()

from kernels.cli import main
sys.argv = ["kernels", "lock", "."]
try:
    main()
except ValueError as e:
    result["lock"] = str(e)
result["requests"] = requests
print(json.dumps(result))
"""


def test_kernels_lock_fails_online_for_an_untrusted_publisher(setup, kernels_cli):
    """Online (the Hub's answers mocked): the docs' `list_repo_refs` lookup gives v1's
    commit; `kernels lock .` refuses org/geglu after asking only about its publisher."""
    out = run_python(setup, MOCK_HUB, offline=False)
    assert out["v1"] == [setup["pinned"]]
    assert out.get("lock", "").startswith(
        "Kernel repository 'org/geglu' is not from a trusted publisher. Set trust_remote_code=True "
        "or add the repository ID to the trust_remote_code allowlist"
    ), out
    assert out["requests"] == ["/api/organizations/org/overview"]
    assert not (setup["project"] / "kernels.lock").exists()


def test_docs_say_what_is_tested():
    """docs/REQUIREMENTS.md's pinning section names the forms tested here, and the README
    points to it with the `revision=` form."""
    text = (REPO / "docs" / "REQUIREMENTS.md").read_text()
    start = text.index("## Pinning in a downstream project")
    end = text.find("\n## ", start + 1)
    flat = " ".join(text[start : end if end != -1 else len(text)].split())
    for form in (
        'get_kernel("org/geglu", revision=COMMIT, trust_remote_code=["org/geglu"])',
        'LayerRepository("org/geglu", layer_name="GeGLUMLP", revision=COMMIT, trust_remote_code=["org/geglu"])',
        'HfApi().list_repo_refs("org/geglu", repo_type="kernel")',
        "Path(geglu.__file__).parents[2].name",
        "Cannot find a local snapshot for org/geglu",
        "is not from a trusted publisher",
        "could not verify publisher trust status",
        '[tool.kernels.dependencies] "org/geglu" = 1',
        "tests/integration/test_pinning.py",
    ):
        assert form in flat, f"docs/REQUIREMENTS.md's pinning section no longer says {form!r}"
    readme = " ".join((REPO / "README.md").read_text().split())
    assert "revision=COMMIT" in readme and "docs/REQUIREMENTS.md#pinning-in-a-downstream-project" in readme
    assert REPO_ID == "org/geglu"
