#!/usr/bin/env bash
# Set up, build, and run the test suite (CPU tests + Triton under TRITON_INTERPRET=1;
# CUDA tests run on a GPU machine and are reported as skipped elsewhere).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python -m tools.build
.venv/bin/python -m pytest "$@"
