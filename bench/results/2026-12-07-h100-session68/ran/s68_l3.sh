#!/usr/bin/env bash
# Session 68, call 3: is ahead (branch, e3fd2de: uahead's U loads under W S^T, the decay in group A and S scaled
# after W S^T) bit-identical to main's kernels, as built? Call 2 passed its checks (full 40/40, backward-quick 22/22,
# GPU tests 204/204), shortened the chain's own path 5498 -> 5033 cycles a step at h64-fixed and left the H100's time
# level (the copies' waits took the difference). Before it lands:
# 1  kda-verify full and backward-quick at one seed on stateclk (main's kernels with the stamps) and aheadclk: the
#    same figures, case by case (lease_same_figures); beside them aheadclk's backward / stress GPU tests;
# 2  aheadclk's backward-full (its recompute and saving instances changed too), if the time allows.
# Run as OUT=$OUT bash .carry/lease/s68_l3.sh with .carry/slim.sh on, timeout_s 600 (LIMIT below the budget left),
# carry [".carry/lease", ".carry/ab"]; returns s68_l3.log, final.tgz.
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s68_l3
lease_unpack stateclk aheadclk
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lim=${LIMIT:-540}
lease_run btests-ah aheadclk 4 200 ./kda_gpu_tests --gtest_filter='*Backward*:*Stress*' & pt=$!
lease_same_figures full stateclk aheadclk
lease_same_figures backward-quick stateclk aheadclk
wait $pt
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/btests-ah.log" | head -5
echo "checks done at $SECONDS s"
if [ $((lim - SECONDS)) -gt 200 ]; then
  lease_bwd_full aheadclk & pb=$!
  wait $pb
  for x in a b c d; do lease_passed "bwdfull-$x" && echo "bwdfull-$x passed" || echo "bwdfull-$x FAILED"; done
fi
lease_checks_done final
echo "done at $SECONDS s"
