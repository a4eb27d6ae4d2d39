"""The release pipeline on CPU, end to end: the variant list, a dry run against the local
build, two successive releases into a local Hub mirror that users pinned to version=1
keep loading from (offline, through `kernels.get_kernel`), refusals through the CLI, and
the Hub calls the publish command makes (against an in-memory stand-in for HfApi).

One build of the current tree serves every test (`release_build`); later "releases" are
copies of it with files edited and digests recomputed with kernels-data.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from release_fakes import COMMIT_A, COMMIT_B  # also puts the repository root on sys.path

from tools import publish as publish_mod
from tools.build import NOARCH_VARIANT, REPO, read_config, stable_abi_buildable, variant_name
from tools.release_api import describe_api
from tools.variants import (
    BUILDER_ALIAS,
    Bounds,
    Machine,
    load_versions,
    local_machine,
    required_variants,
    why_not_local,
)

LOCAL_CPU = variant_name("cpu")  # e.g. torch213-cxx11-cpu-x86_64-linux
REPO_ID = read_config(REPO).repo_id
VERSION = read_config(REPO).version


# --------------------------------------------------------------------------- the variant list


def test_required_variants_are_the_release_matrix():
    names = {v.name for v in required_variants(read_config(REPO), load_versions())}
    # Both backends are built on torch's stable ABI: one variant per platform (and CUDA
    # toolkit), which the version-tied names of the matrix copy (tools/variants.py,
    # BUILDER_ALIAS).
    expected = {"torch-cuda", "torch-stable-abi210-cpu-x86_64-linux", "torch-stable-abi210-cpu-aarch64-linux"}
    for arch in ("x86_64", "aarch64"):
        expected |= {f"torch-stable-abi210-{cu}-{arch}-linux" for cu in ("cu126", "cu130", "cu132")}
    for t in ("212", "213", "214", "215"):
        for arch in ("x86_64", "aarch64"):
            expected.add(f"torch{t}-cxx11-cpu-{arch}-linux")
            expected |= {f"torch{t}-cxx11-{cu}-{arch}-linux" for cu in ("cu126", "cu130", "cu132")}
    assert names == expected
    caps = {v.name: v.capabilities for v in required_variants(read_config(REPO), load_versions())}
    # CUDA 12.6's nvcc knows no Blackwell: those archs are left out of the cu126 variants.
    assert "10.0" not in caps["torch213-cxx11-cu126-x86_64-linux"]
    assert "10.0" in caps["torch213-cxx11-cu130-x86_64-linux"]
    assert caps["torch-stable-abi210-cu126-x86_64-linux"] == caps["torch213-cxx11-cu126-x86_64-linux"]
    by_name = {v.name: v for v in required_variants(read_config(REPO), load_versions())}
    for t in ("212", "213", "214", "215"):
        for arch in ("x86_64", "aarch64"):
            alias = by_name[f"torch{t}-cxx11-cpu-{arch}-linux"]
            assert alias.builder == BUILDER_ALIAS and alias.alias_of == f"torch-stable-abi210-cpu-{arch}-linux"
            for cu in ("cu126", "cu130", "cu132"):
                alias = by_name[f"torch{t}-cxx11-{cu}-{arch}-linux"]
                assert alias.builder == BUILDER_ALIAS and alias.alias_of == f"torch-stable-abi210-{cu}-{arch}-linux"


def test_build_toml_bounds_narrow_the_matrix():
    cfg, versions = read_config(REPO), load_versions()
    names = {v.name for v in required_variants(cfg, versions, Bounds(torch_min="2.13", cuda_max="13.0"))}
    assert "torch212-cxx11-cpu-x86_64-linux" not in names
    assert "torch213-cxx11-cu132-x86_64-linux" not in names
    assert "torch213-cxx11-cu130-x86_64-linux" in names


def test_local_builder_marks():
    variants = required_variants(read_config(REPO), load_versions())
    cpu_box = Machine("2.13", None, "x86_64-linux", True, frozenset({"torch213-cxx11-cpu-x86_64-linux", "torch-cuda"}))
    here = {v.name for v in variants if why_not_local(v, cpu_box) is None}
    assert here == {"torch213-cxx11-cpu-x86_64-linux", "torch-cuda"}
    why = why_not_local(next(v for v in variants if v.name == "torch212-cxx11-cu130-aarch64-linux"), cpu_box)
    assert "torch 2.12" in why and "aarch64-linux" in why and "CUDA 13.0" in why
    # This machine: its CPU variant and the noarch variant, nothing else on a CPU torch.
    m = local_machine()
    assert {LOCAL_CPU, NOARCH_VARIANT} <= m.local_names


@pytest.mark.skipif(torch.version.cuda is not None, reason="rehearses the CPU release of the CI machine's torch; a CUDA torch loads other variants")
def test_variants_cli_json_marks_what_this_machine_builds():
    res = subprocess.run([sys.executable, "-m", "tools.variants", "--json"], cwd=REPO, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)["variants"]
    # 4 torch releases x (6 CUDA + 2 CPU copies) + 6 stable-ABI CUDA + 2 stable-ABI CPU + torch-cuda
    assert len(rows) == 41
    local = {r["name"] for r in rows if r["local"]}
    assert {LOCAL_CPU, "torch-stable-abi210-cpu-x86_64-linux", NOARCH_VARIANT} <= local
    assert all(r["local_reason"] for r in rows if not r["local"])


# --------------------------------------------------------------------------- builds and releases


@pytest.fixture(scope="session")
def release_build(tmp_path_factory) -> Path:
    """A verified build of the current tree (the CPU variant + torch-cuda) in a temp dir.

    build/ is copied when it holds one that verifies (others rebuild it concurrently:
    a half-written copy fails verification and is rebuilt), else tools.build builds it."""
    root = tmp_path_factory.mktemp("release")
    out = root / "build"
    wanted = [LOCAL_CPU, NOARCH_VARIANT]
    src = REPO / "build"
    if all((src / v / "metadata.json").is_file() for v in wanted):
        for v in wanted:
            shutil.copytree(src / v, out / v, ignore=shutil.ignore_patterns("__pycache__"))
        if all(not publish_mod.verify_variant(out / v).problems for v in wanted):
            return out
        shutil.rmtree(out)
    if not stable_abi_buildable():
        pytest.skip(f"build/ lacks {LOCAL_CPU}, and this torch cannot build the stable-ABI CPU variant")
    cmd = [sys.executable, "-m", "tools.build", "--out", str(out), "--work", str(root / "work")]
    subprocess.run(cmd + ["--uid", "1a2b3c4", "--skip-load-check"], cwd=REPO, check=True)
    return out


def rehash(vdir: Path, commit: str | None = None, dirty: bool = False) -> None:
    """Recompute a variant's digest after editing it (and set its provenance commit)."""
    from kernels_data import Digest, DigestAlgorithm

    meta = json.loads((vdir / "metadata.json").read_text())
    meta["digest"]["files"] = dict(sorted(Digest.hash_variant(DigestAlgorithm.SHA256, vdir).files.items()))
    if commit is not None:
        meta.setdefault("provenance", {})["kernel"] = {"commit": commit, "dirty": dirty}
    (vdir / "metadata.json").write_text(json.dumps(meta, indent=2) + "\n")


def make_release(src: Path, dest: Path, commit: str, *, dirty: bool = False, edit=None, extra: dict | None = None) -> Path:
    """A copy of `src` as if built from `commit`; `edit(vdir)` changes each variant;
    `extra` maps new variant names to the variant they copy."""
    for v in sorted(p.name for p in src.iterdir()):
        shutil.copytree(src / v, dest / v)
    for new, base in (extra or {}).items():
        shutil.copytree(src / base, dest / new)
    for vdir in sorted(dest.iterdir()):
        if edit:
            edit(vdir)
        rehash(vdir, commit, dirty)
    return dest


def run_publish(capsys, *args) -> tuple[int, str]:
    # The shared build is unsigned (signing is CI's, keyless): --allow-unsigned, as for
    # any rehearsal. tests/release/test_signing.py covers the refusal without it.
    rc = publish_mod.main([*map(str, args), "--allow-unsigned"])
    out = capsys.readouterr()
    return rc, out.out + out.err


LOAD = """
import json, sys
from pathlib import Path
from kernels import get_kernel
m = get_kernel(sys.argv[1], **json.loads(sys.argv[2]))
d = Path(m.__file__).parent
print(json.dumps({"variant": d.name, "commit": d.parent.parent.name, "files": sorted(p.name for p in d.iterdir()),
                  "all": list(m.__all__)}))
"""


def load_offline(cache: Path, **kwargs) -> dict:
    """get_kernel as an air-gapped user runs it, in a fresh process, from `cache`."""
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_KERNELS", "KERNELS_CACHE")}
    env.update(HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(cache))
    res = subprocess.run(
        [sys.executable, "-c", LOAD, REPO_ID, json.dumps(kwargs)], capture_output=True, text=True, env=env, cwd=cache
    )
    assert res.returncode == 0, res.stdout + res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def ref(mirror: Path, name: str) -> str:
    return (mirror / ("kernels--" + REPO_ID.replace("/", "--")) / "refs" / name).read_text()


def test_dry_run_against_the_local_build_prints_the_plan(release_build, tmp_path):
    mirror = tmp_path / "hub"
    cmd = [sys.executable, "-m", "tools.publish", "--build", str(release_build), "--mirror", str(mirror), "--allow-unsigned"]
    res = subprocess.run(cmd + ["--dry-run", "--create-repo", "--allow-dirty"], cwd=REPO, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout
    assert f"create kernel repository {REPO_ID}" in out and f"create branch v{VERSION} (from main)" in out
    n_files = 0
    for v in (LOCAL_CPU, NOARCH_VARIANT):
        files = [p.relative_to(release_build / v) for p in (release_build / v).rglob("*") if p.is_file()]
        n_files += len(files)
        assert f"new       {v} ({len(files)} files)" in out
        for f in files:
            assert f"add      build/{v}/{f}\n" in out
        assert f"[publish]   {v}: verified (digest, ABI, metadata)" in out
    assert f"summary: {n_files} to add, 0 to replace, 0 to remove, 0 kept" in out
    assert "card: README.md on main: add" in out and "dry run: nothing written" in out
    assert not mirror.exists()
    # Without --create-repo the same plan is refused, with the reason.
    res = subprocess.run(cmd + ["--dry-run", "--allow-dirty"], cwd=REPO, capture_output=True, text=True)
    assert res.returncode == 1 and "[no-repo]" in res.stdout


@pytest.mark.skipif(torch.version.cuda is not None, reason="rehearses the CPU release of the CI machine's torch; a CUDA torch loads other variants")
def test_two_releases_keep_users_pinned_to_version_1_loading(release_build, tmp_path, capsys):
    mirror = tmp_path / "hub"
    r1 = make_release(release_build, tmp_path / "r1", COMMIT_A)
    rc, out = run_publish(capsys, "--build", r1, "--mirror", mirror, "--create-repo", "--allow-dirty")
    assert rc == 0, out
    c1 = ref(mirror, f"v{VERSION}")
    first = load_offline(mirror, version=VERSION)
    assert first["variant"] == LOCAL_CPU and first["commit"] == c1 and "layers" in first["all"]
    readme = (mirror / f"kernels--{REPO_ID.replace('/', '--')}" / "snapshots" / ref(mirror, "main") / "README.md").read_text()
    call = f'get_kernel("{REPO_ID}", version={VERSION}, trust_remote_code=["{REPO_ID}"])'
    assert call in readme and "{{" not in readme and LOCAL_CPU in readme

    # Release 2: a new source commit that adds a module to every variant and a variant
    # for another torch; the branch keeps everything release 1 had.
    def add_module(vdir: Path) -> None:
        (vdir / "release_notes.py").write_text('"""Release 2."""\n')

    other = LOCAL_CPU.replace("torch213", "torch212") if "torch213" in LOCAL_CPU else "torch212-cxx11-cpu-x86_64-linux"
    r2 = make_release(release_build, tmp_path / "r2", COMMIT_B, edit=add_module, extra={other: LOCAL_CPU})
    rc, out = run_publish(capsys, "--build", r2, "--mirror", mirror, "--allow-dirty")
    assert rc == 0, out
    assert f"new       {other}" in out and f"replace   {LOCAL_CPU}" in out
    assert f"add      build/{LOCAL_CPU}/release_notes.py" in out
    assert f"keep     build/{LOCAL_CPU}/__init__.py  (unchanged)" in out
    c2 = ref(mirror, f"v{VERSION}")
    assert c2 != c1

    second = load_offline(mirror, version=VERSION)
    assert second["commit"] == c2 and second["variant"] == LOCAL_CPU and "release_notes.py" in second["files"]
    assert second["all"] == first["all"]
    # Users who locked release 1 by commit still load it, unchanged.
    locked = load_offline(mirror, revision=c1)
    assert locked["commit"] == c1 and "release_notes.py" not in locked["files"]

    # Publishing release 2 again changes nothing.
    rc, out = run_publish(capsys, "--build", r2, "--mirror", mirror, "--allow-dirty")
    assert rc == 0 and "nothing to do" in out and ref(mirror, f"v{VERSION}") == c2


def test_cli_refusals_leave_the_branch_untouched(release_build, tmp_path, capsys):
    mirror = tmp_path / "hub"
    r1 = make_release(release_build, tmp_path / "r1", COMMIT_A)
    assert run_publish(capsys, "--build", r1, "--mirror", mirror, "--create-repo", "--allow-dirty")[0] == 0
    head = ref(mirror, f"v{VERSION}")

    def drop_gelu(vdir: Path) -> None:
        init = vdir / "__init__.py"
        text = init.read_text()
        assert '    "gelu",\n' in text
        init.write_text(text.replace('    "gelu",\n', ""))

    r2 = make_release(release_build, tmp_path / "r2", COMMIT_B, edit=drop_gelu)
    rc, out = run_publish(capsys, "--build", r2, "--mirror", mirror, "--allow-dirty")
    assert rc == 1 and "[api-break]" in out and "`gelu` removed from __all__" in out and f"version = {VERSION + 1}" in out

    r3 = make_release(release_build, tmp_path / "r3", COMMIT_B, dirty=True)
    rc, out = run_publish(capsys, "--build", r3, "--mirror", mirror)
    assert rc == 1 and "[dirty]" in out

    rc, out = run_publish(capsys, "--build", r1, "--variants", LOCAL_CPU, "--mirror", mirror, "--sync", "--allow-dirty")
    assert rc == 1 and "[drops-variant]" in out and NOARCH_VARIANT in out

    rc, out = run_publish(capsys, "--build", r1, "--mirror", mirror, "--version", str(VERSION + 1), "--allow-dirty")
    assert rc == 1 and "[version-mismatch]" in out

    (r1 / LOCAL_CPU / "layers.py").write_text("# tampered\n")
    rc, out = run_publish(capsys, "--build", r1, "--mirror", mirror, "--allow-dirty")
    assert rc == 1 and "[unverified]" in out and "layers.py" in out

    assert ref(mirror, f"v{VERSION}") == head


def test_static_op_schemas_match_what_torch_registers(release_build):
    """The API the publish command compares is what the variant registers when imported."""
    vdir = release_build / LOCAL_CPU
    static = describe_api({p.name: p.read_bytes() for p in vdir.iterdir() if p.is_file() and p.suffix in (".py", ".so")})["ops"]
    script = """
import json, sys, torch
from pathlib import Path
from kernels import get_local_kernel
m = get_local_kernel(Path(sys.argv[1]), backend="cpu")
ns = json.loads((Path(m.__file__).parent / "metadata.json").read_text())["id"]
registered = {str(s.name).split("::", 1)[1]: s for s in torch._C._jit_get_all_schemas() if s.name.startswith(ns + "::")}
same = {}
for name, text in json.loads(sys.argv[2]).items():
    if name in registered:
        try:
            same[name] = torch._C.parse_schema(f"{ns}::{text}") == registered[name]
        except RuntimeError as e:
            same[name] = f"{text}: {e}"
print(json.dumps({"names": sorted(registered), "same": same}))
"""
    env = {k: v for k, v in os.environ.items() if k != "LOCAL_KERNELS"}
    res = subprocess.run(
        [sys.executable, "-c", script, str(release_build), json.dumps(static)], capture_output=True, text=True, env=env, cwd=release_build
    )
    assert res.returncode == 0, res.stderr
    registered = json.loads(res.stdout.strip().splitlines()[-1])
    assert sorted(static) == registered["names"]
    assert registered["same"] and all(v is True for v in registered["same"].values()), registered["same"]


# --------------------------------------------------------------------------- the Hub calls


class FakeHfApi:
    """In-memory kernel repositories answering the HfApi calls tools/publish.py makes."""

    def __init__(self):
        self.repos: dict[str, dict[str, dict[str, bytes]]] = {}  # repo -> branch -> path -> bytes
        self.heads: dict[tuple[str, str], str] = {}
        self.calls: list[tuple] = []
        self.n = 0

    def _commit(self, repo, branch, files):
        self.n += 1
        self.repos[repo][branch] = files
        self.heads[(repo, branch)] = f"{self.n:040x}"
        return self.heads[(repo, branch)]

    def _files(self, repo, revision):
        for (r, b), h in self.heads.items():
            if r == repo and revision in (b, h):
                return self.repos[repo][b]
        raise KeyError(revision)

    def list_repo_refs(self, repo_id, *, repo_type=None):
        from huggingface_hub.errors import RepositoryNotFoundError
        from huggingface_hub.hf_api import GitRefInfo, GitRefs

        assert repo_type == "kernel"
        if repo_id not in self.repos:
            # (Its constructor wants an HTTP response, whose class differs across versions.)
            err = RepositoryNotFoundError.__new__(RepositoryNotFoundError)
            Exception.__init__(err, f"{repo_id} not found")
            raise err
        branches = [GitRefInfo(name=b, ref=f"refs/heads/{b}", target_commit=self.heads[(repo_id, b)]) for b in self.repos[repo_id]]
        return GitRefs(branches=branches, converts=[], tags=[])

    def list_repo_tree(self, repo_id, *, recursive, revision, repo_type):
        from huggingface_hub.hf_api import RepoFile

        assert repo_type == "kernel" and recursive
        return [RepoFile(path=p, size=len(b), oid="0") for p, b in sorted(self._files(repo_id, revision).items())]

    def hf_hub_download(self, repo_id, filename, *, repo_type, revision):
        from huggingface_hub.errors import EntryNotFoundError

        files = self._files(repo_id, revision)
        if filename not in files:
            raise EntryNotFoundError(filename)
        path = Path(os.environ["FAKE_HUB_TMP"]) / f"dl-{self.n}-{filename}"
        path.write_bytes(files[filename])
        return str(path)

    def snapshot_download(self, repo_id, *, repo_type, revision, allow_patterns, cache_dir):
        from huggingface_hub.utils import filter_repo_objects

        files = self._files(repo_id, revision)
        snap = Path(cache_dir) / "snap"
        for p in filter_repo_objects(list(files), allow_patterns=allow_patterns):
            (snap / p).parent.mkdir(parents=True, exist_ok=True)
            (snap / p).write_bytes(files[p])
        return str(snap)

    def create_repo(self, repo_id, *, repo_type, private, exist_ok):
        self.calls.append(("create_repo", repo_id, repo_type))
        self.repos.setdefault(repo_id, {})
        self._commit(repo_id, "main", {".gitattributes": b""})

    def create_branch(self, repo_id, *, branch, repo_type, exist_ok):
        self.calls.append(("create_branch", branch, repo_type))
        self._commit(repo_id, branch, dict(self.repos[repo_id]["main"]))

    def create_commit(self, repo_id, *, operations, repo_type, revision, create_pr, parent_commit=None, **kw):
        from huggingface_hub import CommitOperationAdd, CommitOperationDelete

        self.calls.append(("create_commit", revision, repo_type, create_pr, parent_commit, len(operations)))
        if parent_commit is not None:
            assert self.heads[(repo_id, revision)] == parent_commit, "branch moved"
        files = dict(self.repos[repo_id][revision])
        for op in operations:
            if isinstance(op, CommitOperationAdd):
                with op.as_file() as f:
                    files[op.path_in_repo] = f.read()
            elif isinstance(op, CommitOperationDelete):
                files.pop(op.path_in_repo)
        target = f"refs/pr/{self.n}" if create_pr else revision
        if create_pr:
            self.repos[repo_id][target] = {}
        return type("CommitInfo", (), {"commit_url": f"https://hub/{repo_id}/commit/{self._commit(repo_id, target, files)}"})()


def hub_args(build: Path, *extra: str):
    # (--allow-dirty: the shared build/ may come from a tree with uncommitted changes.)
    return publish_mod.parse_args(["--build", str(build), "--allow-dirty", "--allow-unsigned", *extra])


def test_hub_target_publishes_through_hfapi(release_build, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_HUB_TMP", str(tmp_path))
    api = FakeHfApi()
    target = publish_mod.HubTarget(REPO_ID, api=api)
    r1 = make_release(release_build, tmp_path / "r1", COMMIT_A)

    # A dry run reads and writes nothing.
    assert publish_mod.publish(hub_args(r1, "--dry-run", "--create-repo"), target) == 0
    assert api.calls == []

    assert publish_mod.publish(hub_args(r1, "--create-repo"), target) == 0
    assert [c[0] for c in api.calls] == ["create_repo", "create_commit", "create_branch", "create_commit"]
    assert api.calls[0] == ("create_repo", REPO_ID, "kernel")
    assert api.calls[1][:4] == ("create_commit", "main", "kernel", False)  # the card
    assert api.calls[3][:4] == ("create_commit", f"v{VERSION}", "kernel", False)
    files = api.repos[REPO_ID][f"v{VERSION}"]
    assert f"build/{LOCAL_CPU}/metadata.json" in files and "README.md" in files
    assert files[f"build/{LOCAL_CPU}/layers.py"] == (r1 / LOCAL_CPU / "layers.py").read_bytes()

    # A contributor's pull request against the existing branch: one commit, create_pr,
    # based on the head the plan was made against.
    api.calls.clear()
    r2 = make_release(release_build, tmp_path / "r2", COMMIT_B)
    head = api.heads[(REPO_ID, f"v{VERSION}")]
    assert publish_mod.publish(hub_args(r2, "--create-pr"), target) == 0
    assert api.calls == [("create_commit", f"v{VERSION}", "kernel", True, head, 2)]  # two metadata.json
    out = capsys.readouterr().out
    assert f"replace  build/{LOCAL_CPU}/metadata.json" in out and f"replace  build/{NOARCH_VARIANT}/metadata.json" in out
