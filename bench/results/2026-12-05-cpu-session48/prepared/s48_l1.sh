#!/usr/bin/env bash
# Prepared in session 47, rebuilt in session 48 (no device that session) for the next session's first call (~650 s +
# start): rv5 (session 44's rv3, b6ba863, on main 911e529 as 63239bf: the reverse and state passes' prefetch ranges
# once a CTA, dO' under one dtype switch, U and the decays via ld.shared) against main48 (911e529: session 48's
# verifier, the key norm's rounding fitted out, and the stress probe near_identical_keys_beta_at_2).
#   1  rv5's forward checks (its state pass changed): kda-verify --suite full (the new probe under cuda-generic, the
#      tensor-core class) beside the GPU tests other than the backward / stress ones, and the full suite's stress
#      probes under cuda-recurrent (fp32 class: the probe needs the fit there); then backward-full's near-identical
#      keys at beta 2 under cuda-recurrent (the fp32 backward that failed it before the fit) and cuda-generic
#      (rv3's backward checks passed in session 47: 51/51, backward-full 22/22)
#   2  if the forward checks pass: gpu_ab.sh main48,rv5 at train-h64-fixed and h64-fixed, two rounds
# Archives: .carry/ab/{main48,rv5}.tar.xz (scripts/gpu_build.sh on each commit, copied to .carry/ab/NAME.tar.xz).
# Run as: OUT=$OUT bash .carry/lease/s48_l1.sh
# carry [".carry/lease", ".carry/ab/main48.tar.xz", ".carry/ab/rv5.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s48_l1
lease_unpack main48 rv5
lease_run fwdfull rv5 4 280 ./kda-verify --impl cuda-generic --suite full & pf=$!
lease_run gtests rv5 4 280 ./kda_gpu_tests --gtest_filter='-*Backward*:*Stress*' & pg=$!
lease_run recur rv5 4 200 ./kda-verify --impl cuda-recurrent --suite full --filter stress_ & pr=$!
wait $pf $pg $pr
lease_run bwdrec rv5 6 100 ./kda-verify --impl cuda-recurrent --suite backward-full --filter near_identical_keys & pb=$!
lease_run bwdgen rv5 6 100 ./kda-verify --impl cuda-generic --suite backward-full --filter near_identical_keys & pc=$!
wait $pb $pc
for n in fwdfull recur bwdrec bwdgen; do lease_passed $n && echo "rv5: $n passed" || echo "rv5: $n FAILED"; done
grep -hE " FAIL |kda-verify:|key norm fitted" "$W"/fwdfull.log "$W"/recur.log "$W"/bwdrec.log "$W"/bwdgen.log | head -20
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/gtests.log" | head
lease_checks_done checks-rv5
# main48's verifier still lists near_identical_keys_beta_at_2 among the stress probes (main left it out after 911e529:
# the tensor-core model misses an output element there on some seeds): a failure of that case alone is a finding for
# issue #6, not rv5's, and does not stop the timing.
fwd_ok() { grep -qE "kda-verify: [0-9]+ passed" "$W/fwdfull.log" && ! grep -E " FAIL " "$W/fwdfull.log" | grep -qv near_identical_keys_beta_at_2; }
if fwd_ok && grep -q "^\[  PASSED  \]" "$W/gtests.log" && ! grep -q "^\[  FAILED  \]" "$W/gtests.log"; then
  lease_ab main48,rv5 170 train-h64-fixed h64-fixed
else
  echo "rv5 failed its forward checks: no timing"
fi
