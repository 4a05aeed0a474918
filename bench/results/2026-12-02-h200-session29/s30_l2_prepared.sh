#!/usr/bin/env bash
# Prepared in session 29 for the next session's second device call (~280 s: run with timeout_s 590), not yet run.
# Builds: main (after call 1's verdicts are merged or not), prodspec = main + patches/0003-Products-kernel-built-for-a-
# bf16-dO.patch (the products kernel built for a bf16 dO beside the generic instance: static SASS 4744 -> 4152 at
# K = V = 128, no spill; the same operations), each archive copied to .carry/ab/{main,prodspec}.tar.xz.
# Checks: backward-quick main / prodspec at one fresh seed with bf16 gradients (bf16 dO: the new instance) and with
# fp32 ones, the same figures; prodspec's backward / stress GPU tests. Then the A/B at train-h64-fixed (2 rounds) and
# the products kernel's launches under ncu.
# Run as: OUT=$OUT bash .carry/lease/s30_l2.sh   carry [".carry/lease", ".carry/ab/main.tar.xz",
# ".carry/ab/prodspec.tar.xz"].
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l2
lease_unpack main prodspec
lease_same_figures "backward-quick --input-dtype-grads" main prodspec
lease_same_figures backward-quick main prodspec
lease_run tests prodspec 2 220 ./kda_gpu_tests --gtest_filter='*Backward*:*Stress*'
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/tests.log" | head -20
lease_checks_done
mkdir -p "$OUT/ab"
OUT=$OUT/ab timeout 160 bash scripts/gpu_ab.sh --builds main,prodspec --impl cuda-generic --rounds 2 \
  --workload train-h64-fixed
echo "gpu_ab rc=$?"; date -u
for b in main prodspec; do lease_ncu_launches $b train-h64-fixed 'products'; done
cp "$W"/ncu-*.txt "$OUT/" 2>/dev/null
date -u
