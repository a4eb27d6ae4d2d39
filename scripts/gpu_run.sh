#!/usr/bin/env bash
# Everything GPU-side in one call on the lent GPU machine (torch 2.11 + cu130,
# triton 3.6, no registry): install the carried wheels, build what this torch can
# build (torch-cuda; the stable-ABI sources need torch >= 2.13 headers, so the compiled
# CUDA and CPU variants are built beforehand with `bash scripts/build_cuda_variant.sh`
# and `python -m tools.build` and carried in build/: docs/BUILDING.md), run the whole
# test suite, compute-sanitizer over the CUDA tests, and the benchmarks. Results land
# in $OUT (logs, junit, JSON) and benchmarks/results/ (copied back by the caller). A
# short table prints last.
#
#   bash scripts/gpu_run.sh [build] [test] [sanitize] [bench] [tune]   (default: build test sanitize bench)
#
# Each device command is limited to 10 minutes; pass a subset of stages to split.
# Carried wheels (.whl/, installed below): at least kernels==0.17.2 and
# transformers==5.22.2, requirements.txt's pair; the image's transformers 5.17 accepts
# only kernels>=0.16,<0.17, and with it Transformers' kernels integration is off
# (env.txt says which pair ran and whether the integration is on).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/geglu-out}
mkdir -p "$OUT"
stages=${*:-build test sanitize bench}
export PYTHONUNBUFFERED=1
# The image's default CXX (/opt/gcc/bin/g++) links libstdc++ statically, which drags
# glibc 2.34+ symbols into the module (manylinux_2_28 violations) and would give the
# module its own libstdc++ beside torch's. Build with the system compiler, as torch does.
export CXX=/usr/bin/g++ CC=/usr/bin/gcc

if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || { echo "wheel install failed"; exit 1; }
  export PYTHONPATH=/tmp/site
fi
python3 - <<'PY' | tee "$OUT/env.txt"
import torch, triton, platform, kernels, transformers
from transformers.utils.import_utils import is_kernels_available
print(f"device {torch.cuda.get_device_name()} cc {torch.cuda.get_device_capability()}")
print(f"torch {torch.__version__} triton {triton.__version__} kernels {kernels.__version__} python {platform.python_version()}")
print(f"transformers {transformers.__version__}, kernels integration {'on' if is_kernels_available() else 'OFF'}")
PY

summary=()
run() {  # run NAME CMD...: log to $OUT/NAME.log, remember the outcome
  local name=$1; shift
  local t0=$SECONDS
  "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  summary+=("$(printf '%-12s rc=%-3s %4ss  %s' "$name" "$rc" "$((SECONDS - t0))" "$(tail -n 1 "$OUT/$name.log" | cut -c1-90)")")
  return $rc
}

for stage in $stages; do
  case $stage in
    build) run build python3 -m tools.build ;;
    # -v: one line per test as it ends (with -n too), so a run cut short by the device's
    # time limit still names its failures; -rfEs: the summary names them again.
    test) run test python3 -m pytest -v -rfEs --junitxml="$OUT/junit.xml" -p no:cacheprovider ${PYTEST_ARGS:-} ;;
    sanitize)
      # Not the route tests that read kernel names from torch.profiler (marker `profiler`):
      # CUPTI cannot subscribe beside compute-sanitizer (CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED).
      run sanitize compute-sanitizer --tool memcheck --error-exitcode 9 \
        python3 -m pytest -q -x -p no:cacheprovider tests/kernels/test_cuda_kernels.py tests/kernels/test_gemm_sm90.py \
        -m "not profiler" -k "not 2_31 and not large" ;;
    bench)
      # torch.compile's anchors compile inside the benchmark processes; inductor's pool of
      # compile worker processes would start and warm up in the background while later
      # rows are timed. One compile thread, no pool, takes that suspect away (it did not
      # remove the host-time variation between lent machines: benchmarks/results/README.md).
      export TORCHINDUCTOR_COMPILE_THREADS=1
      for b in ${BENCHES:-compare_activation sweep_triton_activation compare_mlp compare_models}; do
        [ -f benchmarks/$b.py ] && run "$b" python3 benchmarks/$b.py
      done
      mkdir -p "$OUT/results" && cp benchmarks/results/*.json benchmarks/results/*.png "$OUT/results/" 2>/dev/null ;;
    tune) run tune python3 tools/tune_gemm.py ;;
    *) echo "unknown stage $stage"; exit 2 ;;
  esac
done

echo
echo "== summary ($(head -n 1 "$OUT/env.txt"))"
printf '%s\n' "${summary[@]}"
for b in compare_activation compare_mlp compare_models tune; do
  [ -f "$OUT/$b.log" ] && { echo "-- $b"; tail -n 25 "$OUT/$b.log"; }
done
exit 0
