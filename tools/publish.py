"""Publish build/ to the Hub kernel repository's version branch, or to a local mirror.

    python -m tools.publish --dry-run                      # plan against the Hub, change nothing
    python -m tools.publish                                # verify, plan, upload to v<version>
    python -m tools.publish --create-pr                    # the same as a pull request (no write access)
    python -m tools.publish --mirror DIR [--dry-run]       # rehearse into a Hugging Face cache at DIR
    python -m tools.publish --dry-run --allow-unsigned     # plan an unsigned build (signing comes later)

Every variant of the local build is verified first: its digest re-checked with
kernels-data, its native modules with kernel-abi-check (abi3 + manylinux_2_28), its
metadata parsed by kernels-data and by the loader, its version equal to the target
branch, its provenance clean, and it must be signed: a `metadata.json.sigstore` Sigstore bundle beside
its `metadata.json` (the build workflow signs it, keyless through GitHub OIDC, before
uploading; see docs/RELEASING.md), unless --allow-unsigned. Then tools/release_plan.py decides, against what the
branch holds, which files are added, replaced, removed (stale files of a replaced
variant) and kept, or refuses (see that module for the rules). Variants of the branch
that the build lacks are kept as they are. The kernel card (CARD.md filled in) goes
to README.md on main.

The Hub is reached only through huggingface_hub.HfApi (list_repo_refs, list_repo_tree,
snapshot_download, hf_hub_download, create_repo / create_branch / create_commit with
repo_type="kernel"). `--mirror DIR` reads and writes the same state in the layout of a
Hugging Face cache (DIR/kernels--<org>--<name>/refs/v<N> -> snapshots/<commit>/), so
`HF_HUB_OFFLINE=1 HF_HUB_CACHE=DIR get_kernel(repo_id, version=N)` loads the result
the way a user would after a real release.

Exit status: 0 published (or, with --dry-run, nothing refused); 1 refused; 2 error.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import re
import shutil
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from tools.build import REPO, BuildConfig, check_abi, read_config
from tools.release_api import describe_api
from tools.release_plan import METADATA, BranchState, LocalVariant, Plan, RemoteVariant, plan_release

REPO_TYPE = "kernel"
CARD_TEMPLATE = REPO / "CARD.md"
# The Sigstore bundle kernels looks for beside each variant's metadata.json
# (kernels.verify.verify_variant), and the workflow that signs it: the identity a
# kernels.verify.GitHubWorkflowPolicy must name (see signing_policy).
BUNDLE = METADATA + ".sigstore"
SIGNER_WORKFLOW = ".github/workflows/build.yml"


class PublishError(RuntimeError):
    pass


def content_digest(data: bytes) -> str:
    """sha256, base64: the encoding of kernels-data's variant digests."""
    return base64.b64encode(hashlib.sha256(data).digest()).decode()


def _variant_files(vdir: Path) -> Iterable[Path]:
    for p in sorted(vdir.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc":
            yield p


def _api_inputs(files: dict[str, bytes]) -> dict[str, bytes]:
    return {rel: data for rel, data in files.items() if "/" not in rel and rel.endswith((".py", ".so"))}


# --------------------------------------------------------------------------- local build


def verify_variant(vdir: Path) -> LocalVariant:
    """Re-check a variant directory as the loader and kernel-builder would."""
    from kernels._rust import Metadata as LoaderMetadata
    from kernels.variants import parse_variant
    from kernels_data import Digest, DigestValidationError, Metadata

    name = vdir.name
    problems: list[str] = []
    meta_path = vdir / METADATA
    try:
        raw = json.loads(meta_path.read_text())
    except (OSError, ValueError) as e:
        return LocalVariant(name, {}, {}, None, [f"no readable {METADATA} ({e})"])
    try:
        meta = Metadata.read_from_file(meta_path)
        LoaderMetadata.read_from_file(meta_path)
    except ValueError as e:
        return LocalVariant(name, {}, raw, None, [f"{METADATA} does not parse: {e}"])

    if meta.digest is None:
        problems.append(f"{METADATA} has no digest")
    else:
        try:
            meta.digest.validate(Digest.hash_variant(meta.digest.algorithm, vdir))
        except DigestValidationError as e:
            problems.append("digest check failed (kernels-data): " + "; ".join(str(v) for v in e.violations))
    try:
        parse_variant(name)
    except ValueError as e:
        problems.append(f"not a variant name kernels accepts ({e})")
    btype = str((raw.get("backend") or {}).get("type", ""))
    expect = "cpu" if "-cpu-" in name or name == "torch-cpu" else "cuda" if re.search(r"-cu\d+-|^torch-cuda$", name) else None
    if expect and btype != expect:
        problems.append(f"metadata backend {btype!r} does not match the variant name (expected {expect!r})")
    if not name.startswith("torch-") and not (vdir / f"{meta.id}.abi3.so").is_file():
        problems.append(f"compiled variant without its native module {meta.id}.abi3.so")
    for so in sorted(vdir.glob("*.so")):
        for p in check_abi(so):
            problems.append(f"{so.name}: kernel-abi-check: {p}")

    files: dict[str, bytes] = {str(p.relative_to(vdir)): p.read_bytes() for p in _variant_files(vdir)}
    digests = {rel: content_digest(data) for rel, data in files.items()}
    api = describe_api(_api_inputs(files))
    return LocalVariant(name, digests, raw, api, problems)


def unsigned_problem(vdir: Path) -> str | None:
    """Why kernels.verify.verify_variant would answer SignatureBundleMissing, or None."""
    if (vdir / BUNDLE).is_file():
        return None
    return (
        f"unsigned: no {BUNDLE} beside {METADATA}; users cannot verify it "
        f"(release builds are signed by {SIGNER_WORKFLOW}; --allow-unsigned for rehearsals and dry runs)"
    )


def signing_policy(github_repo: str, ref: str = "refs/heads/main"):
    """The kernels verification policy for builds signed by this repository's release
    workflow: GitHub's OIDC issuer, source repository https://github.com/<github_repo>,
    signer https://github.com/<github_repo>/.github/workflows/build.yml@<ref>."""
    from kernels.verify import GitHubWorkflowPolicy

    return GitHubWorkflowPolicy(
        repo_id=github_repo, signer_uris=[f"https://github.com/{github_repo}/{SIGNER_WORKFLOW}@{ref}"]
    )


def read_local_build(build_dir: Path, only: list[str] | None = None) -> dict[str, LocalVariant]:
    if not build_dir.is_dir():
        raise PublishError(f"{build_dir} does not exist: run `python -m tools.build` first")
    names = sorted(p.name for p in build_dir.iterdir() if p.is_dir() and (p / METADATA).is_file())
    if only:
        missing = sorted(set(only) - set(names))
        if missing:
            raise PublishError(f"{build_dir} has no variant {', '.join(missing)} (it has: {', '.join(names) or 'none'})")
        names = [n for n in names if n in only]
    return {n: verify_variant(build_dir / n) for n in names}


# --------------------------------------------------------------------------- kernel card


def render_card(template: str, *, cfg: BuildConfig, repo_id: str, version: int, api: dict | None, variants: list[str]) -> str:
    def bullets(items: list[str]) -> str:
        return "\n".join(f"- {i}" for i in items) if items else "- (none)"

    entries = (api or {}).get("entries", {})
    functions = []
    for name in (api or {}).get("all", []):
        e = entries.get(name, {})
        if e.get("kind") == "function":
            functions.append(f"`{name}{e['text']}`")
        elif e.get("kind") == "module":
            functions.append(f"`{name}` (module)")
        else:
            functions.append(f"`{name}`")
    layers = [f"`{cls}` (forward{l['text'] or '(...)'})" for cls, l in sorted(((api or {}).get("layers") or {}).items())]
    values = {
        "kernel_name": cfg.name,
        "repo_id": repo_id,
        "version": str(version),
        "license": cfg.license.lower(),
        "backends": ", ".join(cfg.backends),
        "functions": bullets(functions),
        "layers": bullets(layers),
        "variants": bullets([f"`{v}`" for v in variants]),
    }

    def fill(m: re.Match) -> str:
        key = m.group(1)
        if key not in values:
            raise PublishError(f"CARD.md has an unknown placeholder {{{{{key}}}}}; known: {', '.join(sorted(values))}")
        return values[key]

    return re.sub(r"\{\{\s*([A-Za-z_]+)\s*\}\}", fill, template)


# --------------------------------------------------------------------------- targets


def _group_build_paths(paths: Iterable[str]) -> tuple[dict[str, list[str]], list[str]]:
    by_variant: dict[str, list[str]] = {}
    other = []
    for p in paths:
        parts = p.split("/", 2)
        if len(parts) == 3 and parts[0] == "build":
            by_variant.setdefault(parts[1], []).append(parts[2])
        else:
            other.append(p)
    return by_variant, other


def _remote_variant(name: str, rels: list[str], read: callable, *, with_api: bool) -> RemoteVariant:
    """A branch variant from its file list; `read(rel)` returns a file's bytes or None."""
    files: dict[str, str | None] = {rel: None for rel in rels}
    meta_bytes = read(METADATA) if METADATA in files else None
    meta = None
    if meta_bytes is not None:
        try:
            meta = json.loads(meta_bytes)
            files[METADATA] = content_digest(meta_bytes)
            for rel, d in ((meta.get("digest") or {}).get("files") or {}).items():
                if rel in files:
                    files[rel] = d
        except ValueError:
            meta = None
    api = None
    if with_api:
        blobs = {rel: read(rel) for rel in rels if "/" not in rel and rel.endswith((".py", ".so"))}
        if all(b is not None for b in blobs.values()):
            api = describe_api(blobs)
    return RemoteVariant(name, files, meta, api)


class MirrorTarget:
    """A Hugging Face cache directory standing in for the Hub repository."""

    def __init__(self, cache: Path, repo_id: str):
        from huggingface_hub.file_download import repo_folder_name

        self.cache = cache
        self.repo_id = repo_id
        self.repo_dir = cache / repo_folder_name(repo_id=repo_id, repo_type=REPO_TYPE)

    def describe(self) -> str:
        return f"mirror {self.repo_dir}"

    def ref(self, name: str) -> str | None:
        p = self.repo_dir / "refs" / name
        return p.read_text().strip() if p.is_file() else None

    def snapshot(self, commit: str) -> Path:
        return self.repo_dir / "snapshots" / commit

    def _files(self, commit: str | None) -> dict[str, Path]:
        if commit is None:
            return {}
        snap = self.snapshot(commit)
        return {str(p.relative_to(snap)): p for p in sorted(snap.rglob("*")) if p.is_file()}

    def read(self, version: int, api_variants: set[str]) -> BranchState:
        state = BranchState(repo_exists=self.ref("main") is not None)
        if not state.repo_exists:
            return state
        refs = self.repo_dir / "refs"
        state.versions = sorted(int(p.name[1:]) for p in refs.iterdir() if re.fullmatch(r"v\d+", p.name))
        main_files = self._files(self.ref("main"))
        if "README.md" in main_files:
            state.card_digest = content_digest(main_files["README.md"].read_bytes())
        head = self.ref(f"v{version}")
        if head is None:
            return state
        state.branch_exists, state.head = True, head
        files = self._files(head)
        by_variant, state.other_files = _group_build_paths(files)
        for v, rels in by_variant.items():

            def read(rel: str, v=v) -> bytes | None:
                p = files.get(f"build/{v}/{rel}")
                return p.read_bytes() if p else None

            rv = _remote_variant(v, rels, read, with_api=True)
            # The mirror has the bytes: use the real digests, not the recorded ones.
            rv.files = {rel: content_digest(files[f"build/{v}/{rel}"].read_bytes()) for rel in rels}
            state.variants[v] = rv
        return state

    def _commit(self, tree: dict[str, bytes | Path]) -> str:
        """Write a snapshot for `tree` (path -> content) and return its id: a hash of the
        tree, so publishing the same content twice yields the same commit."""
        h = hashlib.sha1()
        for path in sorted(tree):
            src = tree[path]
            data = src.read_bytes() if isinstance(src, Path) else src
            h.update(f"{path}\0{hashlib.sha256(data).hexdigest()}\n".encode())
        commit = h.hexdigest()
        snap = self.snapshot(commit)
        if not snap.exists():
            tmp = snap.with_name(snap.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            for path, src in tree.items():
                dest = tmp / path
                dest.parent.mkdir(parents=True, exist_ok=True)
                if isinstance(src, Path):
                    shutil.copy2(src, dest)
                else:
                    dest.write_bytes(src)
            tmp.mkdir(parents=True, exist_ok=True)
            tmp.rename(snap)
        return commit

    def _set_ref(self, name: str, commit: str) -> None:
        p = self.repo_dir / "refs" / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(commit)

    def _pr_ref(self) -> str:
        prs = self.repo_dir / "refs" / "refs" / "pr"
        n = 1 + max((int(p.name) for p in prs.iterdir() if p.name.isdigit()), default=0) if prs.is_dir() else 1
        return f"refs/pr/{n}"

    def apply(self, plan: Plan, build_dir: Path, card: bytes | None, create_pr: bool, message: str) -> str:
        if plan.create_repo:
            self._set_ref("main", self._commit({".gitattributes": b"*.so filter=lfs diff=lfs merge=lfs -text\n"}))
        main_tree: dict[str, bytes | Path] = dict(self._files(self.ref("main")))
        if plan.card and card is not None:
            main_tree["README.md"] = card
            commit = self._commit(main_tree)
            self._set_ref(self._pr_ref() if create_pr else "main", commit)
            print(f"[publish] README.md on main -> {'pull request' if create_pr else 'commit'} {commit}")
        base = plan.head if not plan.create_branch else self.ref("main")
        tree: dict[str, bytes | Path] = dict(self._files(base))
        for a in plan.of("remove"):
            tree.pop(a.path, None)
        for a in plan.of("add") + plan.of("replace"):
            tree[a.path] = build_dir / a.path.removeprefix("build/")
        commit = self._commit(tree)
        target = self._pr_ref() if create_pr else plan.branch
        self._set_ref(target, commit)
        return f"{target} -> {commit} ({self.snapshot(commit)})"


class HubTarget:
    """The kernel repository on the Hub, through huggingface_hub.HfApi only."""

    def __init__(self, repo_id: str, api=None):
        from huggingface_hub import HfApi

        self.repo_id = repo_id
        self.api = api if api is not None else HfApi()

    def describe(self) -> str:
        return f"the Hub ({self.repo_id}, repo_type={REPO_TYPE!r})"

    def read(self, version: int, api_variants: set[str]) -> BranchState:
        from huggingface_hub.errors import EntryNotFoundError, RepositoryNotFoundError
        from huggingface_hub.hf_api import RepoFile

        try:
            refs = self.api.list_repo_refs(self.repo_id, repo_type=REPO_TYPE)
        except RepositoryNotFoundError:
            return BranchState(repo_exists=False)
        branches = {b.name: b.target_commit for b in refs.branches}
        state = BranchState(repo_exists=True)
        state.versions = sorted(int(n[1:]) for n in branches if re.fullmatch(r"v\d+", n))
        if "main" in branches:
            try:
                readme = self.api.hf_hub_download(self.repo_id, "README.md", repo_type=REPO_TYPE, revision=branches["main"])
                state.card_digest = content_digest(Path(readme).read_bytes())
            except EntryNotFoundError:
                pass
        head = branches.get(f"v{version}")
        if head is None:
            return state
        state.branch_exists, state.head = True, head
        tree = self.api.list_repo_tree(self.repo_id, recursive=True, revision=head, repo_type=REPO_TYPE)
        paths = [t.path for t in tree if isinstance(t, RepoFile)]
        by_variant, state.other_files = _group_build_paths(paths)
        # One download of what the comparison needs, pinned to the head commit: every
        # variant's metadata and Python files, and native modules of the variants this
        # release replaces (their op schemas).
        patterns = [f"build/{v}/{METADATA}" for v in by_variant] + [f"build/{v}/*.py" for v in by_variant]
        patterns += [f"build/{v}/{BUNDLE}" for v in by_variant]
        patterns += [f"build/{v}/*.so" for v in by_variant if v in api_variants]
        with tempfile.TemporaryDirectory(prefix="geglu-publish-") as tmp:
            snap = Path(
                self.api.snapshot_download(
                    self.repo_id, repo_type=REPO_TYPE, revision=head, allow_patterns=patterns, cache_dir=tmp
                )
            )
            for v, rels in by_variant.items():

                def read(rel: str, v=v) -> bytes | None:
                    p = snap / "build" / v / rel
                    return p.read_bytes() if p.is_file() else None

                state.variants[v] = _remote_variant(v, rels, read, with_api=True)
                bundle = read(BUNDLE) if BUNDLE in rels else None
                if bundle is not None:  # not in the digest: compare its bytes, keep it when unchanged
                    state.variants[v].files[BUNDLE] = content_digest(bundle)
                if v not in api_variants and state.variants[v].api is not None:
                    # .so not fetched: keep the Python-level API, drop the partial op list.
                    state.variants[v].api["ops"] = {}
        return state

    def apply(self, plan: Plan, build_dir: Path, card: bytes | None, create_pr: bool, message: str, private: bool = False) -> str:
        from huggingface_hub import CommitOperationAdd, CommitOperationDelete

        if plan.create_repo:
            self.api.create_repo(self.repo_id, repo_type=REPO_TYPE, private=private, exist_ok=True)
        if plan.card and card is not None:
            info = self.api.create_commit(
                self.repo_id,
                operations=[CommitOperationAdd(path_in_repo="README.md", path_or_fileobj=card)],
                commit_message="Update the kernel card",
                repo_type=REPO_TYPE,
                revision="main",
                create_pr=create_pr,
            )
            print(f"[publish] README.md on main: {getattr(info, 'pr_url', None) or getattr(info, 'commit_url', info)}")
        if plan.create_branch:
            self.api.create_branch(self.repo_id, branch=plan.branch, repo_type=REPO_TYPE, exist_ok=True)
        ops = [
            CommitOperationAdd(path_in_repo=a.path, path_or_fileobj=str(build_dir / a.path.removeprefix("build/")))
            for a in plan.of("add") + plan.of("replace")
        ] + [CommitOperationDelete(path_in_repo=a.path) for a in plan.of("remove")]
        if not ops:
            return "nothing to commit"
        info = self.api.create_commit(
            self.repo_id,
            operations=ops,
            commit_message=message,
            commit_description=plan.render(),
            repo_type=REPO_TYPE,
            revision=plan.branch,
            create_pr=create_pr,
            # Fails instead of committing over a branch that moved since it was read.
            parent_commit=plan.head,
        )
        return str(getattr(info, "pr_url", None) or getattr(info, "commit_url", info))


# --------------------------------------------------------------------------- main


def publish(args: argparse.Namespace, target=None) -> int:
    cfg = read_config(REPO)
    repo_id = args.repo_id or cfg.repo_id
    version = cfg.version if args.version is None else args.version
    build_dir = args.build.resolve()
    local = read_local_build(build_dir, args.variants)
    unsigned = []
    for v, lv in local.items():
        problem = unsigned_problem(build_dir / v)
        if problem is not None:
            unsigned.append(v)
            if not args.allow_unsigned:
                lv.problems.append(problem)  # refused as [unverified], naming the variant
    if target is None:
        target = MirrorTarget(args.mirror.resolve(), repo_id) if args.mirror else HubTarget(repo_id)
    remote = target.read(version, set(local))

    required: list[str] = []
    if args.require_complete:
        from tools.variants import load_versions, read_bounds, required_variants

        bounds, kernel_min = read_bounds(REPO)
        required = [v.name for v in required_variants(cfg, load_versions(), bounds, kernel_min)]

    after = sorted(set(local) | (set() if args.sync else set(remote.variants)))
    card = None
    if not args.no_card:
        first_api = next((lv.api for lv in local.values() if lv.api), None)
        card = render_card(
            CARD_TEMPLATE.read_text(), cfg=cfg, repo_id=repo_id, version=version, api=first_api, variants=after
        ).encode()
    plan = plan_release(
        local,
        remote,
        repo_id=repo_id,
        kernel_name=cfg.name,
        version=version,
        create_pr=args.create_pr,
        create_repo=args.create_repo,
        sync=args.sync,
        required=required,
        card_digest=content_digest(card) if card is not None else None,
        allow_dirty=args.allow_dirty,
    )
    print(f"[publish] {len(local)} local variant(s) from {build_dir}, target {target.describe()}")
    for v, lv in sorted(local.items()):
        state = "FAILED" if lv.problems else "verified (digest, ABI, metadata)"
        state += "; UNSIGNED" if v in unsigned else f"; signed ({BUNDLE})"
        commit = (((lv.metadata.get("provenance") or {}).get("kernel")) or {}).get("commit") or "?"
        print(f"[publish]   {v}: {state}; id {lv.metadata.get('id')}, version {lv.metadata.get('version')}, commit {commit[:12]}")
    print(plan.render(verbose=args.verbose))
    if not plan.ok:
        return 1
    if unsigned and args.allow_unsigned:
        print(
            f"[publish] WARNING: --allow-unsigned: {', '.join(sorted(unsigned))} ha{'s' if len(unsigned) == 1 else 've'} no {BUNDLE}; "
            "published unsigned, users cannot verify it (`kernels verify-signature`: signature not found)"
        )
    if args.dry_run:
        print("[publish] dry run: nothing written")
        return 0
    if not plan.changes_anything:
        print(f"[publish] {plan.branch} already holds this build: nothing to do")
        return 0
    commits = {((lv.metadata.get("provenance") or {}).get("kernel") or {}).get("commit") for lv in local.values()}
    message = f"Publish {cfg.name} v{version}: {len(local)} variant(s) built from {next(iter(commits)) or 'unknown'}"
    if isinstance(target, HubTarget):
        result = target.apply(plan, build_dir, card, args.create_pr, message, private=args.private)
    else:
        result = target.apply(plan, build_dir, card, args.create_pr, message)
    print(f"[publish] done: {result}")
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", type=Path, default=REPO / "build", help="build root with <variant>/ dirs (default: build/)")
    ap.add_argument("--variants", nargs="+", metavar="VARIANT", help="publish only these variants of the build")
    ap.add_argument("--repo-id", help="Hub repository (default: build.toml [general.hub] repo-id)")
    ap.add_argument("--version", type=int, help="target version N, branch vN (default: build.toml version)")
    ap.add_argument("--mirror", type=Path, help="publish into this Hugging Face cache directory instead of the Hub")
    ap.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    ap.add_argument("--create-pr", action="store_true", help="open pull requests instead of committing (no write access)")
    ap.add_argument("--create-repo", action="store_true", help="create the repository if it does not exist")
    ap.add_argument("--private", action="store_true", help="with --create-repo: create it private")
    ap.add_argument("--sync", action="store_true", help="the build is the whole release: delete branch variants it lacks (refused within a version)")
    ap.add_argument("--require-complete", action="store_true", help="refuse unless the branch holds every variant of tools/versions.toml afterwards")
    ap.add_argument("--no-card", action="store_true", help="do not touch README.md on main")
    ap.add_argument("--allow-dirty", action="store_true", help="with --mirror only: rehearse a build of uncommitted sources")
    ap.add_argument(
        "--allow-unsigned",
        action="store_true",
        help=f"let variants without {BUNDLE} through (rehearsals, dry runs of a build not signed yet); "
        "a published unsigned variant cannot be verified by users (kernels verify-signature: signature not found)",
    )
    ap.add_argument("-v", "--verbose", action="store_true", help="list every kept file")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.allow_dirty and not args.mirror:
        print("[publish] ERROR: --allow-dirty is only for rehearsals into a --mirror", file=sys.stderr)
        return 2
    try:
        return publish(args)
    except PublishError as e:
        print(f"[publish] ERROR: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # network, auth, Hub errors: say what failed, no traceback soup
        print(f"[publish] ERROR: {type(e).__name__}: {e}", file=sys.stderr)
        if not args.mirror and ("Connect" in type(e).__name__ or isinstance(e, OSError)):
            print("[publish] (cannot reach the Hub: rehearse offline with --mirror DIR)", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
