#!/usr/bin/env bash
# Session 49: s5pre (branch s5pre on main 70d0206: phase 1's 3xTF32 [W | U] operands, the backward's recompute and a
# forward that saves for one, split once instead of at each use; meant to keep every bit) against main49py
# (70d0206). ~420 s + start.
#   1  backward-quick at one fresh seed on both (the same figures row for row: the same bits), beside s5pre's
#      backward / stress GPU tests and the saving forward's test
#   2  if they pass: gpu_ab main49py,s5pre at train-h64-fixed (backward, step, forward-saving step) and h64-fixed
# Run as: OUT=$OUT bash .carry/lease/s49_l4.sh
# carry [".carry/lease", ".carry/ab/main49py.tar.xz", ".carry/ab/s5pre.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s49_l4
lease_unpack main49py s5pre
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lease_run tests s5pre 2 200 ./kda_gpu_tests --gtest_filter='*Backward*:*Stress*' & pt=$!
lease_same_figures backward-quick main49py s5pre
wait $pt
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/tests.log" | head -20
lease_checks_done checks-s5pre
if lease_passed same-backward-quick-s5pre && grep -q "^\[  PASSED  \]" "$W/tests.log" && ! grep -q "^\[  FAILED  \]" "$W/tests.log"; then
  lease_ab main49py,s5pre 330 train-h64-fixed h64-fixed
else
  echo "s5pre failed its checks: no timing"
fi
