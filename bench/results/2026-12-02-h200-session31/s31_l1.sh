#!/usr/bin/env bash
# Session 31, first device call (~350 s: run with timeout_s 590).
# Builds (scripts/gpu_build.sh --torch-wheel, archives in .carry/ab): main = p4hoist + p4fold merged (session 30's
# call 1) + disable_recompute on HOPPER (23954d8); prodspec = main + the products kernel built for a bf16 dO
# (session 29's patch 0003: static SASS 4744 -> 4152, the same operations).
# Checks, in parallel: backward-quick main / prodspec at one fresh seed, bf16 and fp32 gradients (the same figures);
# prodspec's backward / stress GPU tests; main's saved-forward GPU tests (CHUNKED and HOPPER, bits saved ==
# recomputed); main's torch op with disable_recompute (pytest, K = V = 64 and 128) with the carried extension.
# Then the A/B at train-h64-fixed (2 rounds; kda-bench now also times the saved step on cuda-generic) and the
# products kernel's launches under ncu.
# Run as: OUT=$OUT bash .carry/lease/s31_l1.sh   carry [".carry/lease", ".carry/ab/main.tar.xz",
# ".carry/ab/prodspec.tar.xz", ".whl"].
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l1
lease_unpack main prodspec
bg=()
lease_run tests prodspec 2 220 ./kda_gpu_tests --gtest_filter='*Backward*:*Stress*' & bg+=($!)
lease_run saved main 2 220 ./kda_gpu_tests --gtest_filter='*Saved*' & bg+=($!)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
( LD_LIBRARY_PATH=/tmp/ab/main KDA_TORCH_LIBRARY=/tmp/ab/main/libkda_torch.so PYTHONPATH="/tmp/site:$PWD/python" \
    timeout 220 python3 -m pytest -q -rs -p no:cacheprovider python/tests/test_ops.py -k disable_recompute \
    > "$W/pytest.log" 2>&1; echo "== pytest rc=$? $(tail -n 1 "$W/pytest.log")" ) & bg+=($!)
lease_same_figures "backward-quick --input-dtype-grads" main prodspec
lease_same_figures backward-quick main prodspec
wait "${bg[@]}"
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/tests.log" "$W/saved.log" | head -20
grep -hE "passed|failed|SKIPPED|Error" "$W/pytest.log" | head -10
lease_checks_done
mkdir -p "$OUT/ab"
OUT=$OUT/ab timeout 200 bash scripts/gpu_ab.sh --builds main,prodspec --impl cuda-generic --rounds 2 \
  --workload train-h64-fixed
echo "gpu_ab rc=$?"; date -u
for b in main prodspec; do lease_ncu_launches $b train-h64-fixed 'products'; done
cp "$W"/ncu-*.txt "$OUT/" 2>/dev/null
date -u
