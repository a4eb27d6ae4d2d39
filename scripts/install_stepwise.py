"""Install a CUDA build of torch from PyPI into this interpreter's environment, one
requirement per pip call, so that the disk never holds all of its wheels at once.

    <venv>/bin/python scripts/install_stepwise.py [--skip NAME ...] TORCH_SPEC [OTHER_SPEC ...]

Why: pip downloads every wheel of a resolution into a temporary directory and deletes
them only after installing the last one. For torch with its NVIDIA libraries that is
~3.5 GB of wheels beside ~5 GB installed, and it ran CI's small disk full. Here torch
goes in alone (--no-deps), then each of its requirements (pip evaluates their
environment markers), then OTHER_SPEC: the temporary copy is at most one wheel's
closure. --skip leaves out requirements by distribution name (the CUDA variant's build
never imports triton). pip runs isolated (PyPI, no local configuration) and without a
cache. Exits non-zero, naming the requirement, when a step fails.
"""

import argparse
import importlib.metadata
import re
import subprocess
import sys

# --no-warn-conflicts: until the last step, torch's requirements are missing by design.
PIP = [sys.executable, "-m", "pip", "--isolated", "install", "-q", "--no-cache-dir", "--disable-pip-version-check",
       "--no-warn-conflicts"]


def pip(*args: str) -> None:
    print(f"[install_stepwise] pip install {' '.join(args)}", flush=True)
    if subprocess.run([*PIP, *args]).returncode != 0:
        sys.exit(f"install_stepwise: pip could not install {' '.join(args)}")


def dist_name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--skip", action="append", default=[], help="a requirement of torch to leave out (repeatable)")
    p.add_argument("torch_spec", help="e.g. torch==2.13.0")
    p.add_argument("others", nargs="*", help="installed last, in one pip call")
    args = p.parse_args()
    skip = {s.lower() for s in args.skip}

    pip("--no-deps", args.torch_spec)
    for req in importlib.metadata.requires("torch") or []:
        if "extra ==" in req or dist_name(req) in skip:
            continue
        pip(req)
    if args.others:
        pip(*args.others)


if __name__ == "__main__":
    main()
