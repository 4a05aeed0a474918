#!/usr/bin/env bash
# Prepared in session 48 (no device that session), after s48_l1 / s48_l2: aqk3 (0669408, branch aqk3 on main 8162600:
# the plain forward's A_qk off-diagonal blocks in 3xTF32 instead of one TF32 pass, and the stress probe
# near_identical_keys_beta_at_2 back in the suites) against main48 (911e529). ~500 s + start.
#   1  aqk3's forward checks: kda-verify --suite full (the probe under cuda-generic: the CPU model put its output
#      element at 0.27-0.72 of the bound with 3xTF32, 1.075 with one pass) beside the GPU tests other than the
#      backward / stress ones
#   2  if they pass: gpu_ab.sh main48,aqk3 at h64-fixed and h96-fixed (prefill; session 13 measured the single pass at
#      -37 us on h64-fixed: the cost of taking it back)
# Run as: OUT=$OUT bash .carry/lease/s49_l1.sh
# carry [".carry/lease", ".carry/ab/main48.tar.xz", ".carry/ab/aqk3.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s49_l1
lease_unpack main48 aqk3
lease_run fwdfull aqk3 6 280 ./kda-verify --impl cuda-generic --suite full & pf=$!
lease_run gtests aqk3 4 280 ./kda_gpu_tests --gtest_filter='-*Backward*:*Stress*' & pg=$!
wait $pf $pg
lease_passed fwdfull && echo "aqk3: forward full passed" || echo "aqk3: forward full FAILED"
grep -hE " FAIL |kda-verify:|near_identical_keys_beta_at_2" "$W/fwdfull.log" | head
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/gtests.log" | head
lease_checks_done checks-aqk3
if lease_passed fwdfull && grep -q "^\[  PASSED  \]" "$W/gtests.log" && ! grep -q "^\[  FAILED  \]" "$W/gtests.log"; then
  lease_ab main48,aqk3 200 h64-fixed h96-fixed
else
  echo "aqk3 failed its forward checks: no timing"
fi
