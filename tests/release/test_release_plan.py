"""The release decision (tools/release_plan.py), offline: what is added, replaced, kept,
and every refusal, on synthetic variants and branch states."""

import pytest
from release_fakes import (
    COMMIT_B,
    CPU,
    CPU_212,
    CU130,
    KERNEL,
    NOARCH,
    REPO_ID,
    local_variant,
    metadata,
    remote_of,
    variant_files,
    branch,
)

from tools.release_plan import BranchState, RemoteVariant, plan_release


def plan(local, remote, **kw):
    kw.setdefault("repo_id", REPO_ID)
    kw.setdefault("kernel_name", KERNEL)
    kw.setdefault("version", 1)
    return plan_release({lv.name: lv for lv in local}, remote, **kw)


def codes(p):
    return sorted({r.code for r in p.refusals})


def paths(p, action):
    return sorted(a.path for a in p.of(action))


# --------------------------------------------------------------------------- accepted plans


def test_first_release_creates_repo_and_branch_and_adds_every_file():
    cpu, noarch = local_variant(CPU), local_variant(NOARCH)
    p = plan([cpu, noarch], BranchState(), create_repo=True, card_digest="card")
    assert p.ok, p.render()
    assert p.create_repo and p.create_branch
    assert p.variants == {CPU: "new", NOARCH: "new"}
    assert paths(p, "add") == sorted([f"build/{CPU}/{f}" for f in cpu.files] + [f"build/{NOARCH}/{f}" for f in noarch.files])
    assert not p.of("replace") and not p.of("remove") and not p.of("keep")
    assert p.card == "add"
    text = p.render()
    assert "create kernel repository org/geglu" in text and f"add      build/{CPU}/metadata.json" in text


def test_new_branch_on_existing_repo_is_created_from_main():
    state = BranchState(repo_exists=True, versions=[1])
    p = plan([local_variant(CPU, version=2)], state, version=2)
    assert p.ok and p.create_branch and not p.create_repo and p.branch == "v2"


def test_republishing_the_same_build_changes_nothing():
    cpu = local_variant(CPU)
    p = plan([cpu], branch(remote_of(cpu), card="card"), card_digest="card")
    assert p.ok
    assert p.variants == {CPU: "unchanged"}
    assert not p.changes_anything
    assert {a.action for a in p.actions} == {"keep"}


def test_rebuild_replaces_changed_files_removes_stale_ones_and_keeps_other_variants():
    old_cpu = local_variant(CPU, uid="1111111")
    old_cu = local_variant(CU130, uid="1111111")
    # The rebuild has a new namespace (new .so name, new _ops.py), one new module, the
    # same __init__.py.
    new_files = variant_files(CPU, uid="2222222", **{"extra.py": "X = 1\n"})
    new_cpu = local_variant(CPU, new_files, uid="2222222", commit=COMMIT_B)
    p = plan([new_cpu], branch(remote_of(old_cpu), remote_of(old_cu)))
    assert p.ok, p.render()
    assert p.variants == {CPU: "replace", CU130: "keep"}
    assert paths(p, "add") == [f"build/{CPU}/_geglu_cpu_2222222.abi3.so", f"build/{CPU}/extra.py"]
    assert paths(p, "replace") == [f"build/{CPU}/_ops.py", f"build/{CPU}/metadata.json"]
    assert paths(p, "remove") == [f"build/{CPU}/_geglu_cpu_1111111.abi3.so"]
    kept = paths(p, "keep")
    assert f"build/{CPU}/__init__.py" in kept and f"build/{CU130}/metadata.json" in kept
    assert all(a.path.startswith(f"build/{CPU}/") or a.action == "keep" for a in p.actions)


def test_additions_are_fine_when_every_variant_is_rebuilt():
    init = variant_files(CPU)["__init__.py"].decode().replace('"layers"]', '"layers", "geglu_merged"]')
    init = init.replace("from .activation import geglu,", "from .activation import geglu_merged, geglu,")
    act = variant_files(CPU)["activation.py"].decode() + "\n\ndef geglu_merged(x, approximate='tanh'):\n    return x\n"
    new = [local_variant(n, variant_files(n, **{"__init__.py": init, "activation.py": act}), commit=COMMIT_B) for n in (CPU, NOARCH)]
    old = [remote_of(local_variant(n)) for n in (CPU, NOARCH)]
    p = plan(new, branch(*old))
    assert p.ok, p.render()


def test_kept_variants_with_the_same_api_do_not_block_a_partial_release():
    cpu_new = local_variant(CPU, commit=COMMIT_B)
    p = plan([cpu_new], branch(remote_of(local_variant(CPU)), remote_of(local_variant(CU130))))
    assert p.ok, p.render()


# --------------------------------------------------------------------------- refusals


def test_refuses_an_empty_build():
    assert codes(plan([], branch())) == ["empty"]


@pytest.mark.parametrize(
    "meta_kw, why",
    [
        ({"dirty": True}, "uncommitted changes"),
        ({"uid": "abc1234_dirty"}, "ends in _dirty"),
        ({"commit": None}, "no provenance.kernel.commit"),
    ],
)
def test_refuses_a_dirty_build(meta_kw, why):
    p = plan([local_variant(CPU, **meta_kw)], branch())
    assert codes(p) == ["dirty"]
    assert why in p.refusals[0].message and "commit, rebuild" in p.refusals[0].message


def test_allow_dirty_turns_the_refusal_into_a_warning():
    p = plan([local_variant(CPU, dirty=True)], branch(), allow_dirty=True)
    assert p.ok and any("dirty build" in w for w in p.warnings)


def test_refuses_an_unverified_variant():
    lv = local_variant(CPU, problems=["digest check failed (kernels-data): Hash mismatch: layers.py"])
    p = plan([lv], branch())
    assert codes(p) == ["unverified"] and "layers.py" in p.refusals[0].message


def test_refuses_metadata_version_other_than_the_target_branch():
    p = plan([local_variant(CPU, version=2)], branch(), version=1)
    assert codes(p) == ["version-mismatch"]
    assert "version 2" in p.refusals[0].message and "branch v1" in p.refusals[0].message


def test_refuses_a_build_of_another_kernel():
    p = plan([local_variant(CPU, kernel="relu")], branch())
    assert "name-mismatch" in codes(p)


def test_refuses_to_overwrite_a_branch_holding_another_kernel():
    other = remote_of(local_variant(CPU, kernel="activation"))
    p = plan([local_variant(CPU)], branch(other))
    assert "foreign-branch" in codes(p)
    assert "holds kernel 'activation'" in " ".join(r.message for r in p.refusals)


def test_refuses_a_branch_variant_without_metadata():
    p = plan([local_variant(CPU)], branch(RemoteVariant(CU130, {"weights.bin": None}, None)))
    assert codes(p) == ["foreign-branch"]


def test_refuses_to_drop_a_variant_the_branch_has():
    cpu, old212 = local_variant(CPU), remote_of(local_variant(CPU_212))
    p = plan([cpu], branch(remote_of(cpu), old212), sync=True)
    assert codes(p) == ["drops-variant"]
    assert CPU_212 in p.refusals[0].message and p.variants[CPU_212] == "drop"
    assert paths(p, "remove") == sorted(f"build/{CPU_212}/{f}" for f in old212.files)
    # Without --sync the branch's variant is kept.
    assert plan([cpu], branch(remote_of(cpu), old212)).variants[CPU_212] == "keep"


def test_refuses_to_drop_cuda_archs_of_a_replaced_variant():
    old = remote_of(local_variant(CU130, archs=["8.0", "9.0a", "10.0"]))
    p = plan([local_variant(CU130, archs=["8.0", "9.0a"], commit=COMMIT_B)], branch(old))
    assert codes(p) == ["drops-variant"] and "10.0" in p.refusals[0].message


def test_ptx_entry_keeps_the_arch_it_extends():
    """build.toml's 8.0 became 8.0+PTX (SASS for 8.0 and the PTX): nothing is lost; the
    reverse drops the PTX that newer GPUs ran."""
    old = remote_of(local_variant(CU130, archs=["8.0", "9.0a"]))
    assert codes(plan([local_variant(CU130, archs=["7.5", "8.0+PTX", "9.0a"], commit=COMMIT_B)], branch(old))) == []
    old = remote_of(local_variant(CU130, archs=["8.0+PTX", "9.0a"]))
    p = plan([local_variant(CU130, archs=["8.0", "9.0a"], commit=COMMIT_B)], branch(old))
    assert codes(p) == ["drops-variant"] and "8.0+PTX" in p.refusals[0].message


def _edited(name, **files):
    return local_variant(name, variant_files(name, **files), commit=COMMIT_B)


def _replace(rel, old, new):
    text = variant_files(CPU)[rel].decode()
    assert old in text, (rel, old)
    return {rel: text.replace(old, new)}


@pytest.mark.parametrize(
    "edit, expect",
    [
        (_replace("__init__.py", '"gelu", ', ""), "`gelu` removed from __all__"),
        (_replace("activation.py", 'approximate="tanh"', 'approximate="none"'), "default of `approximate` changed"),
        (_replace("activation.py", 'approximate="tanh"', "approximate"), "lost its default"),
        (_replace("activation.py", "def gelu(out, x)", "def gelu(output, x)"), "`out` renamed to `output`"),
        (_replace("activation.py", "def gelu(out, x)", "def gelu(out, x, scale)"), "new required parameter `scale`"),
        (_replace("activation.py", "def gelu(out, x)", "def gelu(out, /, x)"), "positional-only"),
        (_replace("layers.py", "class GeluTanh(nn.Module)", "class GeluTanhX(nn.Module)"), "layer `GeluTanh` removed"),
        (_replace("layers.py", "def forward(self, x):\n        return geglu", "def forward(self, y):\n        return geglu"), "layer `GeGLUMLP.forward"),
        (_replace("layers.py", "can_torch_compile = True", "can_torch_compile = False"), "can_torch_compile changed from True to False"),
        ({"_geglu_cpu_abc1234.abi3.so": b"\x00gelu_and_mul(Tensor! out, Tensor input) -> ()\x00"}, "op `geglu` removed"),
        ({"_geglu_cpu_abc1234.abi3.so": b"\x00gelu_and_mul(Tensor! out, Tensor input, float s) -> ()\x00geglu(Tensor gate, Tensor up, str approximate) -> Tensor\x00"}, "op schema changed"),
        (_replace("activation.py", '"(Tensor gate, Tensor up, str approximate) -> Tensor"', '"(Tensor gate, Tensor up) -> Tensor"'), "op schema changed: `geglu_triton"),
    ],
)
def test_refuses_public_api_changes_within_a_version(edit, expect):
    old = remote_of(local_variant(CPU))
    p = plan([_edited(CPU, **edit)], branch(old))
    assert "api-break" in codes(p), p.render()
    msg = " ".join(r.message for r in p.refusals)
    assert expect in msg and "version = 2" in msg


def test_refuses_a_new_variant_whose_api_lacks_what_the_branch_serves():
    old = remote_of(local_variant(CPU))
    edit = _replace("__init__.py", '"gelu", ', "")
    p = plan([_edited(CU130, **edit)], branch(old))
    assert codes(p) == ["api-break"] and f"vs build/{CPU}" in p.refusals[0].message


def test_version_0_allows_api_changes_and_drops_with_warnings():
    old = remote_of(local_variant(CPU, version=0))
    old212 = remote_of(local_variant(CPU_212, version=0))
    new = local_variant(CPU, variant_files(CPU, **_replace("__init__.py", '"gelu", ', "")), version=0, commit=COMMIT_B)
    p = plan([new], branch(old, old212), version=0, sync=True)
    assert p.ok, p.render()
    assert any("removed from __all__" in w for w in p.warnings) and any(CPU_212 in w for w in p.warnings)


def test_refuses_additions_while_older_variants_stay_on_the_branch():
    act = variant_files(CPU)["activation.py"].decode().replace("def gelu(out, x)", "def gelu(out, x, *, inplace=False)")
    new = local_variant(CPU, variant_files(CPU, **{"activation.py": act}), commit=COMMIT_B)
    p = plan([new], branch(remote_of(local_variant(CPU)), remote_of(local_variant(CU130))))
    assert codes(p) == ["api-partial"]
    msg = p.refusals[0].message
    assert "new optional parameter `inplace=False`" in msg and CU130 in msg and "version 2" in msg


def test_refuses_when_the_branch_api_cannot_be_read():
    old = remote_of(local_variant(CPU))
    old.api = None
    assert codes(plan([local_variant(CPU, commit=COMMIT_B)], branch(old))) == ["api-unknown"]


def test_refuses_a_build_mixing_source_commits():
    p = plan([local_variant(CPU), local_variant(NOARCH, commit=COMMIT_B)], branch())
    assert codes(p) == ["mixed-build"]


def test_refuses_a_build_whose_variants_disagree_on_the_api():
    stale = local_variant(NOARCH, variant_files(NOARCH, **_replace("__init__.py", '"gelu", ', "")))
    p = plan([local_variant(CPU), stale], branch())
    assert "mixed-build" in codes(p)


def test_refuses_missing_repo_without_create_repo():
    p = plan([local_variant(CPU)], BranchState())
    assert codes(p) == ["no-repo"] and "--create-repo" in p.refusals[0].message


@pytest.mark.parametrize("state", [BranchState(), BranchState(repo_exists=True, versions=[])])
def test_pull_request_cannot_create_repo_or_branch(state):
    p = plan([local_variant(CPU)], state, create_pr=True, create_repo=True)
    assert codes(p) == ["no-branch"] and "maintainer" in p.refusals[0].message


def test_pull_request_to_an_existing_branch_is_planned_like_a_commit():
    p = plan([local_variant(CPU, commit=COMMIT_B, uid="2222222")], branch(remote_of(local_variant(CPU))), create_pr=True)
    assert p.ok and p.of("replace")


def test_require_complete_refuses_missing_required_variants():
    required = [CPU, CPU_212, NOARCH]
    p = plan([local_variant(CPU)], branch(remote_of(local_variant(CPU_212))), required=required)
    assert codes(p) == ["incomplete"] and NOARCH in p.refusals[0].message and CPU_212 not in p.refusals[0].message
    p = plan([local_variant(CPU), local_variant(NOARCH)], branch(remote_of(local_variant(CPU_212))), required=required)
    assert p.ok, p.render()


def test_card_is_replaced_only_when_it_changed():
    cpu = local_variant(CPU)
    assert plan([cpu], branch(remote_of(cpu), card="old"), card_digest="new").card == "replace"
    assert plan([cpu], branch(remote_of(cpu), card="new"), card_digest="new").card is None
    assert plan([cpu], branch(remote_of(cpu)), card_digest="new").card == "add"


def test_remote_version_mismatch_is_refused():
    old = remote_of(local_variant(CPU))
    old.metadata = metadata(CPU, version=3)
    assert "version-mismatch" in codes(plan([local_variant(CPU, commit=COMMIT_B)], branch(old)))
