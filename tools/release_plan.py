"""What a release adds to, replaces on, keeps on and refuses for a Hub version branch.

`plan_release` is a pure function: it takes the verified local build (file digests,
metadata, public API per variant) and the state of the target branch (its files with
their digests, the metadata and API of each variant it holds) and returns a `Plan`.
tools/publish.py reads both sides (from `build/` and the Hub or a local mirror) and
carries a plan out only when it has no refusal.

The rules are those of a Hub version branch `v<N>`: users pinned to `version=N` must
keep loading, with the same public API, whatever is published later. So a release
refuses to:
- publish a dirty build (uncommitted sources: `_dirty` namespace or provenance), an
  unverified one (digest, ABI, metadata), or one whose metadata version is not N;
- overwrite a branch that holds another kernel;
- drop a variant the branch has, or CUDA archs a replaced variant had;
- remove or change anything of the branch's public API (`__all__`, signatures, layers,
  schemas of ops not named `_...`; internal `_` ops are free to change, see
  tools/release_api.py): that needs version N+1;
- add public API while variants built from older sources stay on the branch (they
  would lack it): rebuild every variant, or publish as version N+1.
Version 0 is for unstable kernels: there API changes and drops are only warnings.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from tools.release_api import compare_ops, compare_python_api, python_api_key

METADATA = "metadata.json"


@dataclass
class LocalVariant:
    """A variant directory of the local build, after verification."""

    name: str
    files: dict[str, str]  # relpath -> content digest, metadata.json included
    metadata: dict
    api: dict | None = None
    problems: list[str] = field(default_factory=list)  # failed verifications


@dataclass
class RemoteVariant:
    """A variant directory on the target branch."""

    name: str
    files: dict[str, str | None]  # relpath -> content digest (None where unknown)
    metadata: dict | None  # None: no readable metadata.json
    api: dict | None = None  # None: API not read (or not readable)


@dataclass
class BranchState:
    repo_exists: bool = False
    branch_exists: bool = False
    head: str | None = None  # commit the branch points at
    variants: dict[str, RemoteVariant] = field(default_factory=dict)
    other_files: list[str] = field(default_factory=list)  # paths outside build/
    versions: list[int] = field(default_factory=list)  # N of every v<N> branch
    card_digest: str | None = None  # README.md on main


@dataclass(frozen=True)
class Refusal:
    code: str
    message: str


@dataclass(frozen=True)
class FileAction:
    action: str  # "add" | "replace" | "remove" | "keep"
    path: str  # path in the repository
    variant: str | None = None
    note: str = ""


@dataclass
class Plan:
    repo_id: str
    version: int
    head: str | None = None
    create_repo: bool = False
    create_branch: bool = False
    variants: dict[str, str] = field(default_factory=dict)  # new | replace | unchanged | keep | drop
    actions: list[FileAction] = field(default_factory=list)
    card: str | None = None  # "add" | "replace" | None (unchanged or not published)
    refusals: list[Refusal] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def branch(self) -> str:
        return f"v{self.version}"

    @property
    def ok(self) -> bool:
        return not self.refusals

    def of(self, action: str) -> list[FileAction]:
        return [a for a in self.actions if a.action == action]

    @property
    def changes_anything(self) -> bool:
        return bool(self.create_repo or self.create_branch or self.card or self.of("add") or self.of("replace") or self.of("remove"))

    def refuse(self, code: str, message: str) -> None:
        self.refusals.append(Refusal(code, message))

    def render(self, verbose: bool = False) -> str:
        lines = [f"Release plan for {self.repo_id}, branch {self.branch}:"]
        if self.create_repo:
            lines.append(f"  create kernel repository {self.repo_id}")
        if self.create_branch:
            lines.append(f"  create branch {self.branch} (from main)")
        elif self.head:
            lines.append(f"  branch {self.branch} is at {self.head}")
        lines.append("variants:")
        for v, status in sorted(self.variants.items(), key=lambda kv: (_STATUS_ORDER.index(kv[1]), kv[0])):
            n = sum(1 for a in self.actions if a.variant == v)
            lines.append(f"  {status:<9} {v} ({n} files)")
        lines.append("files:")
        for a in self.actions:
            if a.action == "keep" and self.variants.get(a.variant) == "keep" and not verbose:
                continue
            lines.append(f"  {a.action:<8} {a.path}" + (f"  ({a.note})" if a.note else ""))
        for v, status in sorted(self.variants.items()):
            if status == "keep" and not verbose:
                n = sum(1 for a in self.actions if a.variant == v)
                lines.append(f"  keep     build/{v}/ (all {n} files: variant not in this build)")
        card = {"add": "add", "replace": "replace", None: "keep (unchanged)"}[self.card]
        lines.append(f"card: README.md on main: {card}")
        lines.append(
            f"summary: {len(self.of('add'))} to add, {len(self.of('replace'))} to replace, "
            f"{len(self.of('remove'))} to remove, {len(self.of('keep'))} kept"
        )
        for w in self.warnings:
            lines.append(f"warning: {w}")
        if self.refusals:
            lines.append(f"REFUSED ({len(self.refusals)} reason(s)):")
            for r in self.refusals:
                lines.append(f"  [{r.code}] {r.message}")
        else:
            lines.append("ok: nothing refused")
        return "\n".join(lines)


_STATUS_ORDER = ["new", "replace", "unchanged", "keep", "drop"]


def _provenance_problem(meta: dict) -> str | None:
    """Why a variant's metadata does not prove a build from committed sources."""
    if str(meta.get("id", "")).endswith("_dirty"):
        return f"its ops namespace {meta.get('id')} ends in _dirty (built from a tree with uncommitted changes)"
    kernel = (meta.get("provenance") or {}).get("kernel")
    if not kernel or not kernel.get("commit"):
        return "its metadata has no provenance.kernel.commit (built outside git?)"
    if kernel.get("dirty"):
        return f"provenance says commit {kernel['commit'][:12]} plus uncommitted changes"
    return None


def _archs(meta: dict | None) -> set[str]:
    return set(((meta or {}).get("backend") or {}).get("archs") or [])


def _lost_archs(old: set[str], new: set[str]) -> set[str]:
    """Archs an old build served that a new one does not; `X+PTX` serves X as well
    (SASS for X plus PTX), so X -> X+PTX loses nothing, while X+PTX -> X loses the PTX."""
    return {a for a in old - new if a.removesuffix("+PTX") + "+PTX" not in new}


def plan_release(
    local: Mapping[str, LocalVariant],
    remote: BranchState,
    *,
    repo_id: str,
    kernel_name: str,
    version: int,
    create_pr: bool = False,
    create_repo: bool = False,
    sync: bool = False,
    required: Collection[str] = (),
    card_digest: str | None = None,
    allow_dirty: bool = False,
) -> Plan:
    """Decide what publishing `local` to branch v<version> of `remote` does, or why not.

    `sync`: the local build is the whole release, so branch variants it lacks would be
    deleted (kernel-builder uploads a whole build/ that way); `required`: variant names
    the branch must hold afterwards; `card_digest`: digest of the README.md for main."""
    plan = Plan(repo_id=repo_id, version=version, head=remote.head)
    branch = plan.branch
    unstable = version == 0

    def breaking(code: str, message: str) -> None:
        if unstable:
            plan.warnings.append(f"{message} (allowed: version 0 is unstable)")
        else:
            plan.refuse(code, message)

    # ---- the local build on its own
    if not local:
        plan.refuse("empty", "the build has no variant to publish")
    for v in sorted(local):
        lv = local[v]
        for p in lv.problems:
            plan.refuse("unverified", f"{v}: {p}")
        if lv.metadata.get("name") != kernel_name:
            plan.refuse("name-mismatch", f"{v}: metadata names kernel {lv.metadata.get('name')!r}, build.toml {kernel_name!r}")
        if lv.metadata.get("version") != version:
            plan.refuse(
                "version-mismatch",
                f"{v}: metadata.json has version {lv.metadata.get('version')}, the target is branch {branch}: "
                f"rebuild with `version = {version}` in build.toml, or publish to v{lv.metadata.get('version')}",
            )
        why = _provenance_problem(lv.metadata)
        if why:
            msg = f"{v} is a dirty build: {why}; commit, rebuild (python -m tools.build) and publish that"
            if allow_dirty:
                plan.warnings.append(msg)
            else:
                plan.refuse("dirty", msg)
    commits = {((lv.metadata.get("provenance") or {}).get("kernel") or {}).get("commit") for lv in local.values()}
    if len(commits) > 1:
        plan.refuse("mixed-build", f"the build mixes variants of {len(commits)} source commits: rebuild them together")
    apis = {v: lv.api for v, lv in local.items() if lv.api is not None}
    if len({python_api_key(a) for a in apis.values()}) > 1:
        plan.refuse("mixed-build", f"the variants of the build disagree on the public API ({', '.join(sorted(apis))}): rebuild them together")
    for v, lv in sorted(local.items()):
        if lv.api is None or lv.api.get("errors"):
            plan.refuse("unverified", f"{v}: cannot read its public API: {'; '.join((lv.api or {}).get('errors') or ['not read'])}")

    # ---- repository and branch
    if not remote.repo_exists:
        if create_pr:
            plan.refuse("no-branch", f"{repo_id} does not exist, and a pull request cannot create it: a maintainer publishes the first release")
        elif not create_repo:
            plan.refuse("no-repo", f"{repo_id} does not exist: pass --create-repo to create it (check the name first)")
        plan.create_repo = True
        plan.create_branch = True
    elif not remote.branch_exists:
        if create_pr:
            plan.refuse("no-branch", f"branch {branch} does not exist, and a pull request cannot create it: ask a maintainer (write access) to publish it")
        plan.create_branch = True
        latest = max(remote.versions, default=None)
        if latest is not None and version != latest + 1:
            plan.warnings.append(f"creating {branch} while the latest version branch is v{latest}")

    # ---- what the branch holds
    for v, rv in sorted(remote.variants.items()):
        if rv.metadata is None:
            plan.refuse("foreign-branch", f"build/{v} on {branch} has no readable metadata.json: cannot tell which kernel it is; refusing to overwrite")
            continue
        if rv.metadata.get("name") != kernel_name:
            plan.refuse(
                "foreign-branch",
                f"{branch} of {repo_id} holds kernel {rv.metadata.get('name')!r} (build/{v}), not {kernel_name!r}: refusing to overwrite another kernel",
            )
        if rv.metadata.get("version") not in (None, version):
            plan.refuse("version-mismatch", f"build/{v} on {branch} has metadata version {rv.metadata.get('version')}: the branch is inconsistent")

    # ---- file actions
    for v in sorted(local):
        lv, rv = local[v], remote.variants.get(v)
        prefix = f"build/{v}/"
        if rv is None:
            plan.variants[v] = "new"
            plan.actions += [FileAction("add", prefix + f, v) for f in sorted(lv.files)]
            continue
        changed = False
        for f in sorted(lv.files):
            if f not in rv.files:
                plan.actions.append(FileAction("add", prefix + f, v))
                changed = True
            elif rv.files[f] is not None and rv.files[f] == lv.files[f]:
                plan.actions.append(FileAction("keep", prefix + f, v, "unchanged"))
            else:
                plan.actions.append(FileAction("replace", prefix + f, v))
                changed = True
        for f in sorted(set(rv.files) - set(lv.files)):
            plan.actions.append(FileAction("remove", prefix + f, v, "not in the new build of this variant"))
            changed = True
        plan.variants[v] = "replace" if changed else "unchanged"
        lost = _lost_archs(_archs(rv.metadata), _archs(lv.metadata))
        if lost:
            breaking("drops-variant", f"{v}: the new build lacks CUDA archs {sorted(lost)} that {branch} serves now")
    for v in sorted(set(remote.variants) - set(local)):
        rv = remote.variants[v]
        if sync:
            plan.variants[v] = "drop"
            plan.actions += [FileAction("remove", f"build/{v}/{f}", v, "variant not in this build") for f in sorted(rv.files)]
            breaking(
                "drops-variant",
                f"{branch} has {v} and this release would delete it: users of that torch/platform pinned to "
                f"version={version} would stop loading; build it too, or publish without --sync",
            )
        else:
            plan.variants[v] = "keep"
            plan.actions += [FileAction("keep", f"build/{v}/{f}", v) for f in sorted(rv.files)]

    # ---- public API against what the branch serves
    reference_apis: dict[tuple, tuple[str, dict]] = {}
    for v, rv in sorted(remote.variants.items()):
        if rv.api is not None:
            reference_apis.setdefault(python_api_key(rv.api), (v, rv.api))
    reported: set[tuple[str, str]] = set()
    for v in sorted(local):
        lv, rv = local[v], remote.variants.get(v)
        if lv.api is None:
            continue
        if rv is not None:
            if rv.api is None:
                if rv.metadata is not None:
                    plan.refuse("api-unknown", f"cannot read the public API of build/{v} on {branch}, so cannot show this release keeps it")
                continue
            breaks = compare_python_api(rv.api, lv.api)[0] + compare_ops(rv.api, lv.api)
            against = [(v, breaks)]
        else:
            against = [(ref_v, compare_python_api(ref_api, lv.api)[0]) for ref_v, ref_api in reference_apis.values()]
        for ref_v, breaks in against:
            for b in breaks:
                if (ref_v, b) not in reported:
                    reported.add((ref_v, b))
                    breaking("api-break", f"{v} vs build/{ref_v} on {branch}: {b}; that needs `version = {version + 1}`")

    # A branch serves one API: variants kept from an older build must not lack what
    # this build adds (a user would see it on one torch/platform and not another).
    new_api = next((local[v].api for v in sorted(local) if local[v].api and not local[v].api.get("errors")), None)
    lacking: dict[str, list[str]] = {}
    for v in sorted(v for v, s in plan.variants.items() if s == "keep"):
        rv = remote.variants[v]
        if new_api is None:
            break
        if rv.api is None:
            if rv.metadata is not None:  # (without metadata it is refused above)
                plan.refuse("api-unknown", f"cannot read the public API of build/{v}, which stays on {branch}")
            continue
        adds = compare_python_api(rv.api, new_api)[1]
        if adds:
            lacking[v] = adds
    if lacking:
        added = sorted({a for adds in lacking.values() for a in adds})
        breaking(
            "api-partial",
            f"this build adds public API ({'; '.join(added)}) that {len(lacking)} variant(s) kept on {branch} "
            f"from an older build lack ({', '.join(lacking)}): rebuild and publish every variant together "
            f"(the CI release), or publish as version {version + 1}",
        )

    # ---- completeness
    after = {v for v, s in plan.variants.items() if s != "drop"}
    missing = [r for r in required if r not in after]
    if missing:
        plan.refuse("incomplete", f"after this release {branch} would still lack {len(missing)} required variant(s): {', '.join(missing)}")

    # ---- kernel card on main
    if card_digest is not None and card_digest != remote.card_digest:
        plan.card = "add" if remote.card_digest is None else "replace"
        if create_pr and not remote.repo_exists:
            plan.card = None
    return plan
