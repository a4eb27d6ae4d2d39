#!/usr/bin/env bash
# The distributed tests (tests/integration/test_distributed.py: FSDP2, DDP, tensor
# parallelism, torch.compile of FSDP2) on the lent 2-GPU machine (kind nvidia-h200-x2):
# NCCL with one GPU per rank, plus the Gemma-2B-width FSDP2 step-time test that only
# runs there. The same pytest command runs them on CPU with gloo anywhere else.
#
#   bash scripts/run_distributed.sh build   # a bare machine: carried wheels + build (scripts/gpu_run.sh build)
#   bash scripts/run_distributed.sh         # the tests; junit XML and the log to $OUT when set
#   bash scripts/run_distributed.sh -k tensor_parallel   # extra arguments go to pytest
#
# Each device command is limited to 10 minutes: build in one call, test in the next
# (a warm machine keeps build/ between calls).
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
# NVLink multicast off, as the lent machines require (the tests set these for the
# ranks too).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

if [ "${1:-}" = build ]; then
  bash scripts/gpu_run.sh build || { echo "build failed: see ${OUT:-/tmp/geglu-out}/build.log"; exit 1; }
  exit 0
fi
# scripts/gpu_run.sh installs the carried wheels (.whl/) under /tmp/site.
if [ -d .whl ] && [ -d /tmp/site ]; then
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi

# Without two GPUs the tests would run their CPU/gloo variant and skip the GPU one:
# on the machine meant for the GPU run, that is an error, not a pass.
"$PYTHON" - <<'PY' || exit 2
import sys, torch
n = torch.cuda.device_count()
print(f"torch {torch.__version__}, {n} CUDA GPU(s): {[torch.cuda.get_device_name(i) for i in range(n)]}")
sys.exit(0 if n >= 2 else "needs 2 CUDA GPUs for the NCCL run")
PY

args=(-v -rA -p no:cacheprovider tests/integration/test_distributed.py "$@")
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  "$PYTHON" -m pytest "${args[@]}" --junitxml="$OUT/distributed_junit.xml" 2>&1 | tee "$OUT/distributed.log"
  exit "${PIPESTATUS[0]}"
fi
"$PYTHON" -m pytest "${args[@]}"
