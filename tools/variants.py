"""The build variants a geglu release must ship, and which of them this machine can build.

    python -m tools.variants                  # table: every required variant, built here or not
    python -m tools.variants --json           # the same, machine-readable
    python -m tools.variants --names [--builder nix|local] [--local]
    python -m tools.variants --github-matrix  # the CI build matrix (one job per backend x platform)
    python -m tools.variants --check          # validate tools/versions.toml against build.toml

The list is build.toml (backends, each kernel's cuda-capabilities, the optional
`[torch]` / `[general.cuda]` minver/maxver bounds) crossed with the one versions table,
tools/versions.toml. Compiled variants are built by kernel-builder (Nix) in CI; the
noarch variants are assembled by tools/build.py. "Here" means `python -m tools.build`
produces that variant on this machine with the torch that is installed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tools.build import NOARCH_VARIANT, REPO, BuildConfig, read_config, stable_abi_tag

VERSIONS_TOML = Path(__file__).resolve().parent / "versions.toml"

# GitHub-hosted runners per platform for the Nix build matrix.
RUNNERS = {"x86_64-linux": "ubuntu-24.04", "aarch64-linux": "ubuntu-24.04-arm"}

BUILDER_NIX = "nix"  # kernel-builder, from flake.nix
BUILDER_LOCAL = "local"  # tools/build.py (pure-Python variants)
# A version-tied name of a backend built on torch's stable ABI ([torch.stable-abi] in
# build.toml): a copy of that backend's stable-ABI variant, which loads on every torch
# the name stands for. Releases keep shipping these names for `kernels` releases that
# do not resolve stable-ABI variants (a published variant is never dropped).
BUILDER_ALIAS = "alias"


@dataclass(frozen=True)
class Variant:
    name: str
    backend: str  # "cuda" | "cpu"
    torch: str | None  # "2.13"; None for a noarch variant (any torch)
    cuda: str | None  # toolkit "13.0" of a compiled CUDA variant
    platform: str | None  # "x86_64-linux"; None for a noarch variant
    capabilities: tuple[str, ...] = ()  # CUDA archs compiled into the variant
    builder: str = BUILDER_NIX
    alias_of: str | None = None  # BUILDER_ALIAS: the stable-ABI variant it copies


@dataclass(frozen=True)
class Machine:
    """What the local builder works with: its output names and the facts behind them."""

    torch: str  # "2.13"
    cuda: str | None  # "13.0" for a CUDA build of torch, else None
    platform: str  # "x86_64-linux"
    has_nvcc: bool
    local_names: frozenset[str] = field(default_factory=frozenset)


# --------------------------------------------------------------------------- inputs


def load_versions(path: Path = VERSIONS_TOML) -> dict:
    with open(path, "rb") as f:
        return tomllib.load(f)


def _version_key(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.split("."))


@dataclass(frozen=True)
class Bounds:
    """Optional version bounds of build.toml (edition 5); read_config does not carry them."""

    torch_min: str | None = None
    torch_max: str | None = None
    cuda_min: str | None = None
    cuda_max: str | None = None

    def torch_ok(self, v: str) -> bool:
        k = _version_key(v)
        return (self.torch_min is None or k >= _version_key(self.torch_min)) and (
            self.torch_max is None or k <= _version_key(self.torch_max)
        )

    def cuda_ok(self, v: str, kernel_min: str | None = None) -> bool:
        k = _version_key(v)
        lo = [b for b in (self.cuda_min, kernel_min) if b]
        return all(k >= _version_key(b) for b in lo) and (self.cuda_max is None or k <= _version_key(self.cuda_max))


def read_bounds(src: Path = REPO) -> tuple[Bounds, dict[str, str]]:
    """Bounds of build.toml plus each kernel's `cuda-minver` (by kernel section name)."""
    with open(src / "build.toml", "rb") as f:
        raw = tomllib.load(f)
    torch = raw.get("torch", {})
    cuda = raw.get("general", {}).get("cuda", {})
    bounds = Bounds(torch.get("minver"), torch.get("maxver"), cuda.get("minver"), cuda.get("maxver"))
    kernel_min = {name: sec["cuda-minver"] for name, sec in raw.get("kernel", {}).items() if "cuda-minver" in sec}
    return bounds, kernel_min


# --------------------------------------------------------------------------- the matrix


def cuda_tag(cuda: str) -> str:
    major, minor = cuda.split(".")[:2]
    return f"cu{major}{minor}"


def _cap_base(cap: str) -> str:
    """`9.0a` / `10.0f` / `8.0+PTX` -> `9.0` / `10.0` / `8.0`: the arch the toolkit must know."""
    return cap.removesuffix("+PTX").rstrip("af")


def required_variants(
    cfg: BuildConfig, versions: dict, bounds: Bounds = Bounds(), kernel_cuda_min: dict[str, str] | None = None
) -> list[Variant]:
    """Every variant the release must ship, in a stable order (compiled, then noarch)."""
    kernel_cuda_min = kernel_cuda_min or {}
    platforms = versions.get("platforms", {})
    toolkit_caps = versions.get("cuda-capabilities", {})
    cuda_kernels = [k for k in cfg.kernels if k.backend == "cuda"]
    out: list[Variant] = []
    stable = getattr(cfg, "stable_abi", {}) or {}

    def cuda_caps(cv: str) -> tuple[str, ...]:
        """The archs of every CUDA kernel section toolkit `cv` can target."""
        caps: list[str] = []
        for k in cuda_kernels:
            if not bounds.cuda_ok(cv, kernel_cuda_min.get(k.name)):
                continue
            for c in k.cuda_capabilities:
                if _cap_base(c) in toolkit_caps.get(cv, []) and c not in caps:
                    caps.append(c)
        return tuple(sorted(caps, key=lambda c: _version_key(_cap_base(c))))

    torch_entries = [e for e in versions["torch"] if bounds.torch_ok(e["version"])]
    has_cuda = "cuda" in cfg.backends and bool(cuda_kernels)
    has_cpu = "cpu" in cfg.backends and any(k.backend == "cpu" for k in cfg.kernels)
    # Stable-ABI variants: one per backend (per CUDA toolkit) and platform, for every
    # torch from the target release on.
    if "cpu" in stable and has_cpu:
        tag = stable_abi_tag(stable["cpu"])
        for plat in platforms.get("cpu", []):
            out.append(Variant(f"{tag}-cpu-{plat}", "cpu", stable["cpu"], None, plat))
    if "cuda" in stable and has_cuda:
        tag = stable_abi_tag(stable["cuda"])
        toolkits = sorted({cv for e in torch_entries for cv in e.get("cuda", [])}, key=_version_key)
        for cv in toolkits:
            caps = cuda_caps(cv)
            for plat in platforms.get("cuda", []) if caps else []:
                out.append(Variant(f"{tag}-{cuda_tag(cv)}-{plat}", "cuda", stable["cuda"], cv, plat, caps))
    for entry in torch_entries:
        tv = entry["version"]
        torch_tag = "torch" + tv.replace(".", "")
        if has_cuda:
            for cv in entry.get("cuda", []):
                caps = cuda_caps(cv)
                if not caps:
                    continue
                for plat in platforms.get("cuda", []):
                    name = f"{torch_tag}-cxx11-{cuda_tag(cv)}-{plat}"
                    if "cuda" in stable:
                        source = f"{stable_abi_tag(stable['cuda'])}-{cuda_tag(cv)}-{plat}"
                        out.append(Variant(name, "cuda", tv, cv, plat, caps, BUILDER_ALIAS, source))
                    else:
                        out.append(Variant(name, "cuda", tv, cv, plat, caps))
        if has_cpu:
            for plat in platforms.get("cpu", []):
                name = f"{torch_tag}-cxx11-cpu-{plat}"
                if "cpu" in stable:
                    source = f"{stable_abi_tag(stable['cpu'])}-cpu-{plat}"
                    out.append(Variant(name, "cpu", tv, None, plat, (), BUILDER_ALIAS, source))
                else:
                    out.append(Variant(name, "cpu", tv, None, plat))
    for backend, name in versions.get("noarch", {}).items():
        if backend in cfg.backends:
            out.append(Variant(name, backend, None, None, None, (), BUILDER_LOCAL))
    return out


# --------------------------------------------------------------------------- this machine


def local_machine() -> Machine:
    """The running torch / platform, and the variant names `python -m tools.build` emits."""
    import platform

    import torch

    from tools.build import nvcc_path, read_config, torch_backend, variant_name

    tv = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    cuda = ".".join(torch.version.cuda.split(".")[:2]) if torch.version.cuda else None
    has_nvcc = nvcc_path() is not None
    # Mirrors tools.build.main: CPU kernels build on any torch, CUDA kernels need a
    # CUDA torch and nvcc, the noarch variant is always assembled.
    stable = read_config(REPO).stable_abi
    names = {variant_name("cpu"), NOARCH_VARIANT}
    if "cpu" in stable:
        names.add(variant_name("cpu", stable["cpu"]))
    if cuda and has_nvcc:
        names.add(variant_name(torch_backend(), stable.get("cuda")))
        if "cuda" in stable:
            names.add(variant_name(torch_backend()))
    plat = f"{platform.machine()}-{platform.system().lower()}"
    return Machine(tv, cuda, plat, has_nvcc, frozenset(names))


def why_not_local(v: Variant, m: Machine) -> str | None:
    """None when the local builder produces `v` here, else the reason it does not."""
    if v.name in m.local_names:
        return None
    reasons = []
    if v.torch is not None and v.torch != m.torch and not v.name.startswith("torch-stable-abi"):
        reasons.append(f"torch {v.torch} (installed: {m.torch})")
    if v.platform is not None and v.platform != m.platform:
        reasons.append(f"an {v.platform} machine")
    if v.backend == "cuda" and v.cuda is not None:
        if m.cuda != v.cuda:
            reasons.append(f"a CUDA {v.cuda} build of torch (installed: {'CUDA ' + m.cuda if m.cuda else 'CPU'})")
        if not m.has_nvcc:
            reasons.append("nvcc")
    return "needs " + ", ".join(reasons) if reasons else "not produced by tools/build.py"


# --------------------------------------------------------------------------- checks


def check_matrix(cfg: BuildConfig, versions: dict, variants: list[Variant]) -> list[str]:
    """Problems with the versions table: names kernels cannot parse, missing entries."""
    from kernels.variants import parse_variant

    problems = []
    names = [v.name for v in variants]
    if len(set(names)) != len(names):
        problems.append("duplicate variant names")
    for v in variants:
        try:
            parsed = parse_variant(v.name)
        except ValueError as e:
            problems.append(f"{v.name}: kernels cannot parse it ({e})")
            continue
        if parsed.variant_str != v.name:
            problems.append(f"{v.name}: kernels reads it as {parsed.variant_str}")
    for entry in versions.get("torch", []):
        for cv in entry.get("cuda", []):
            if cv not in versions.get("cuda-capabilities", {}):
                problems.append(f"CUDA {cv} (torch {entry['version']}) has no [cuda-capabilities] entry")
    for backend in cfg.backends:
        if not versions.get("platforms", {}).get(backend):
            problems.append(f"build.toml backend {backend!r} has no [platforms] entry")
        if not any(v.backend == backend for v in variants):
            problems.append(f"build.toml backend {backend!r} yields no variant")
    for plat in {p for ps in versions.get("platforms", {}).values() for p in ps}:
        if plat not in RUNNERS:
            problems.append(f"platform {plat} has no CI runner in tools/variants.py RUNNERS")
    return problems


def github_matrix(variants: list[Variant]) -> dict:
    """`{"include": [...]}`: one Nix build job per backend x platform."""
    groups: dict[tuple[str, str], list[Variant]] = {}
    aliases: dict[tuple[str, str], list[Variant]] = {}
    for v in variants:
        if v.builder == BUILDER_NIX:
            groups.setdefault((v.backend, v.platform), []).append(v)
        elif v.builder == BUILDER_ALIAS:
            aliases.setdefault((v.backend, v.platform), []).append(v)
    include = []
    for (backend, plat), vs in groups.items():
        include.append(
            {
                "backend": backend,
                "platform": plat,
                "runner": RUNNERS[plat],
                "variants": " ".join(v.name for v in vs),
                # "<alias>=<stable-ABI variant>" pairs: copied after the build.
                "aliases": " ".join(f"{a.name}={a.alias_of}" for a in aliases.get((backend, plat), [])),
                # CPU variants are tested on the runner with each torch's CPU wheel
                # (a stable-ABI variant with every torch its aliases name).
                "test-torch": " ".join(
                    sorted({v.torch for v in vs + aliases.get((backend, plat), []) if v.builder != BUILDER_NIX or not v.name.startswith("torch-stable-abi")})
                )
                if backend == "cpu"
                else "",
            }
        )
    return {"include": include}


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    out = ap.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print every variant as JSON")
    out.add_argument("--names", action="store_true", help="print variant names, one a line")
    out.add_argument("--github-matrix", action="store_true", help="print the CI build matrix as JSON")
    out.add_argument("--check", action="store_true", help="validate the matrix; exit 1 on a problem")
    ap.add_argument(
        "--builder", choices=[BUILDER_NIX, BUILDER_LOCAL, BUILDER_ALIAS], help="only variants built by this builder"
    )
    ap.add_argument("--local", action="store_true", help="only variants tools/build.py produces here")
    ap.add_argument("--versions", type=Path, default=VERSIONS_TOML, help="versions table (default: tools/versions.toml)")
    args = ap.parse_args(argv)

    cfg = read_config(REPO)
    versions = load_versions(args.versions)
    bounds, kernel_min = read_bounds(REPO)
    variants = required_variants(cfg, versions, bounds, kernel_min)

    if args.check:
        problems = check_matrix(cfg, versions, variants)
        for p in problems:
            print(f"[variants] ERROR: {p}", file=sys.stderr)
        print(f"[variants] {len(variants)} variants, " + ("ok" if not problems else f"{len(problems)} problem(s)"))
        return 1 if problems else 0
    if args.github_matrix:
        print(json.dumps(github_matrix(variants)))
        return 0

    machine = local_machine()
    here = {v.name: why_not_local(v, machine) for v in variants}
    if args.builder:
        variants = [v for v in variants if v.builder == args.builder]
    if args.local:
        variants = [v for v in variants if here[v.name] is None]

    if args.names:
        print("\n".join(v.name for v in variants))
    elif args.json:
        rows = []
        for v in variants:
            row = asdict(v)
            row["capabilities"] = list(v.capabilities)
            row["local"] = here[v.name] is None
            row["local_reason"] = here[v.name]
            rows.append(row)
        print(json.dumps({"kernel": cfg.name, "version": cfg.version, "variants": rows}, indent=2))
    else:
        n_local = sum(here[v.name] is None for v in variants)
        print(
            f"{cfg.name} v{cfg.version}: {len(variants)} variants "
            f"(build.toml backends {', '.join(cfg.backends)} x {args.versions.name}); "
            f"{n_local} built here (torch {machine.torch}, {machine.platform}, "
            f"{'CUDA ' + machine.cuda if machine.cuda else 'CPU torch'}, nvcc {'yes' if machine.has_nvcc else 'no'})"
        )
        print(f"{'variant':<36} {'backend':<7} {'torch':<5} {'built by':<14} {'here':<4} notes")
        for v in variants:
            by = {BUILDER_NIX: "kernel-builder", BUILDER_ALIAS: "copy"}.get(v.builder, "tools/build.py")
            mark = "yes" if here[v.name] is None else "no"
            notes = [f"archs {' '.join(v.capabilities)}"] if v.capabilities else []
            if v.alias_of:
                notes.append(f"copy of {v.alias_of}")
            if here[v.name]:
                notes.append(here[v.name])
            print(f"{v.name:<36} {v.backend:<7} {v.torch or 'any':<5} {by:<14} {mark:<4} {'; '.join(notes)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
