#!/usr/bin/env bash
# Session 53 (prepared, no device lent that session), call 1: phase 1's two prepared changes against main53 (e85ce36),
# alone and together:
#   betaT   (751965a-family; branch betaT): a plain forward stages v as bf16 planes, beta on T's columns, U's
#           products two for bf16 v. Not bit-identical by design (the CPU model's figures: docs/numerics.md).
#   p1loop  (branch p1loop): a CTA an SM loops over tasks from a workspace counter; the next task's rows are loaded
#           into registers while this one's [W | U] copies drain. Bit-identical by design (the same arithmetic).
#   both    (branch both): p1loop + betaT.
#   1  kda-verify --suite full on main53 and p1loop at one seed (p1loop must give main53's figures row for row),
#      beside the full suite and the forward GPU tests on both (betaT's figures: compare offline with main53's row by
#      row; every kda-bench run of step 3 verifies betaT alone); then p1loop's backward checks (backward-quick and
#      the backward / stress GPU tests: the recompute's phase 1 is the same loop)
#   2  phase 1's launches of one h64-fixed step under ncu, each build
#   3  gpu_ab main53,betaT,p1loop,both, 2 rounds: h64-fixed, h96-fixed (its second phase-1 launch runs beside a state
#      pass: the counter's second slot), h64-mixed
# ~450 s + start. Run as: OUT=$OUT bash .carry/lease/s53_l1.sh
# carry [".carry/lease", ".carry/ab/main53.tar.xz", ".carry/ab/betaT.tar.xz", ".carry/ab/p1loop.tar.xz",
#        ".carry/ab/both.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s53_l1
lease_unpack main53 betaT p1loop both
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lease_run gtests both 4 240 ./kda_gpu_tests --gtest_filter='-*Backward*:*Stress*:*Decode*' & pg=$!
lease_run fwdfull both 4 240 ./kda-verify --impl cuda-generic --suite full & pf=$!
lease_same_figures full main53 p1loop
wait $pg $pf
lease_passed fwdfull && echo "both: forward full passed" || echo "both: forward full FAILED"
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/gtests.log" | head
grep -hE " FAIL |kda-verify:|near_identical_keys_beta_at_2" "$W/fwdfull.log" | cut -c1-150
lease_bwd_quick p1loop
ok=1
for n in same-full-p1loop fwdfull; do lease_passed "$n" || ok=0; done
grep -q "^\[  PASSED  \]" "$W/gtests.log" && ! grep -q "^\[  FAILED  \]" "$W/gtests.log" || ok=0
if [ $ok = 1 ]; then
  for b in main53 betaT p1loop both; do lease_ncu_launches "$b" h64-fixed prepare; done
  lease_ab main53,betaT,p1loop,both 280 h64-fixed h96-fixed h64-mixed
else
  echo "a check failed: no timing"
fi
date -u
