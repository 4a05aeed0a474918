#!/usr/bin/env bash
# gpu_check.sh: everything one GPU lease runs, in one call: the card's state, the GPU test suite, kda-bench on the
# standard workloads (verified, then timed), FLA timed on the same workloads, and the SASS/register report.
# Logs and JSON go to $OUT. Uses the binaries carried in .carry/bin (built here by scripts/gpu_build.sh); builds
# on the device only if they will not start there.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kda-gpu-out}
mkdir -p "$OUT"
BIN=.carry/bin
COMMIT=$(cat .carry/COMMIT 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)
export LD_LIBRARY_PATH="$PWD/$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONUNBUFFERED=1

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv \
  | tee "$OUT/gpu.txt"
if ! "$BIN/kda_gpu_tests" --gtest_list_tests >/dev/null 2>&1; then
  echo "carried binaries do not start here; building on the device" | tee -a "$OUT/gpu.txt"
  cmake -S . -B build -G Ninja -DKDA_CPU_ARCH=x86-64-v3 -DEigen3_DIR=.carry/eigen3/share/eigen3/cmake >/dev/null \
    && cmake --build build && BIN=build
fi

echo "== resource usage" | tee "$OUT/sass.txt"
cuobjdump --dump-resource-usage "$BIN/kda-bench" 2>&1 | grep -E "Function|REG|STACK" | head -40 | tee -a "$OUT/sass.txt"

echo "== GPU tests"
"$BIN/kda_gpu_tests" --gtest_output=json:"$OUT/gpu_tests.json" 2>&1 | tee "$OUT/gpu_tests.log" \
  | grep -E "^\[  (PASSED|FAILED)|FAILED|rel_rmse|Failure|seed" | head -120
tests_rc=${PIPESTATUS[0]}

echo "== kda-bench"
"$BIN/kda-bench" --commit "$COMMIT" --impl cuda-generic --iters 100 \
  --workload h96-fixed --workload h96-mixed --workload h96-uniform \
  --workload h64-fixed --workload h64-mixed --workload h64-uniform \
  --workload kimi-8k --workload serve-256x32 --workload serve-64x100 \
  --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log"

echo "== FLA"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && PYTHONPATH=/tmp/site timeout 300 python3 scripts/fla_bench.py --commit "$COMMIT" --json "$OUT/fla.json" 2>&1 \
    | tee "$OUT/fla.log" | grep -v Warning
fi
echo "gpu tests exit code: $tests_rc"
exit "$tests_rc"
