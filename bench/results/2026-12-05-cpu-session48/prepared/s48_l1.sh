#!/usr/bin/env bash
# Prepared in session 47 for the next session's first call (~450 s + start): rv4 (session 44's rv3, b6ba863, on main
# 59917a1: the reverse and state passes' prefetch ranges once a CTA, dO' under one dtype switch, U and the decays via
# ld.shared) against main47 (59917a1: main with qkfin2's backward finishing and segsplit).
#   1  rv4's forward checks (its state pass changed): kda-verify --suite full beside the GPU tests other than the
#      backward / stress ones (session 47 measured its backward checks as rv3: 51/51 tests, backward-full 22/22)
#   2  if they pass: gpu_ab.sh main47,rv4 at train-h64-fixed and h64-fixed, two rounds (session 47, rv3 against main's
#      older kernels: backward -0.5%)
# Archives: .carry/ab/{main47,rv4}.tar.xz (scripts/gpu_build.sh on each commit, copied to .carry/ab/NAME.tar.xz).
# Run as: OUT=$OUT bash .carry/lease/s48_l1.sh
# carry [".carry/lease", ".carry/ab/main47.tar.xz", ".carry/ab/rv4.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s48_l1
lease_unpack main47 rv4
lease_run fwdfull rv4 4 280 ./kda-verify --impl cuda-generic --suite full & pf=$!
lease_run gtests rv4 4 280 ./kda_gpu_tests --gtest_filter='-*Backward*:*Stress*' & pg=$!
wait $pf $pg
lease_passed fwdfull && echo "rv4: forward full passed" || echo "rv4: forward full FAILED"
grep -hE " FAIL |kda-verify:" "$W/fwdfull.log" | head
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/gtests.log" | head
lease_checks_done checks-rv4
if lease_passed fwdfull && grep -q "^\[  PASSED  \]" "$W/gtests.log" && ! grep -q "^\[  FAILED  \]" "$W/gtests.log"; then
  lease_ab main47,rv4 200 train-h64-fixed h64-fixed
else
  echo "rv4 failed its forward checks: no timing"
fi
