#!/usr/bin/env bash
# Session 53 (prepared, no device lent that session), call 1: phase 1's two prepared changes against main53 (e85ce36),
# alone and together:
#   betaT   (branch betaT): a plain forward stages v as bf16 planes, beta on T's columns, U's products two for bf16 v.
#           Not bit-identical by design (the CPU model's figures: docs/numerics.md).
#   p1loop  (branch p1loop): a CTA an SM loops over tasks from a workspace counter; the next task's rows are loaded
#           into registers while this one's [W | U] copies drain. Bit-identical by design (the same arithmetic).
#   both    (branch both): p1loop + betaT.
#   1  kda-verify --suite full on main53 and both at one seed (both's figures against main53's, row by row, offline:
#      betaT's precision claim), beside the forward GPU tests on both (~190 s: session 52's call 5 ran two full
#      suites in 170 s of their 200 s limit)
#   2  kda-verify --suite quick on main53 and p1loop at one seed (p1loop must give main53's figures row for row),
#      beside p1loop's backward checks (backward-quick and the backward / stress GPU tests: the recompute's phase 1
#      is the same loop)
#   3  phase 1's launches of one h64-fixed step under ncu, each build
#   4  gpu_ab main53,betaT,p1loop,both, 2 rounds: h64-fixed, h96-fixed (its second phase-1 launch runs beside a state
#      pass: the counter's second slot), h64-mixed; every run verified against the fp64 oracle
# ~480 s + start. Run as: OUT=$OUT bash .carry/lease/s53_l1.sh
# carry [".carry/lease", ".carry/ab/main53.tar.xz", ".carry/ab/betaT.tar.xz", ".carry/ab/p1loop.tar.xz",
#        ".carry/ab/both.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s53_l1
lease_unpack main53 betaT p1loop both
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lease_run gtests both 4 240 ./kda_gpu_tests --gtest_filter='-*Backward*:*Stress*:*Decode*' & pg=$!
lease_same_figures full main53 both
wait $pg
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/gtests.log" | head
grep -hE " FAIL |near_identical_keys_beta_at_2|beta_at_2_negative" "$W/same-full-both.log" | cut -c1-150
lease_same_figures quick main53 p1loop & pq=$!
lease_bwd_quick p1loop
wait $pq
ok=1
for n in same-full-both same-quick-p1loop bq; do lease_passed "$n" || ok=0; done
for n in gtests tests; do grep -q "^\[  PASSED  \]" "$W/$n.log" && ! grep -q "^\[  FAILED  \]" "$W/$n.log" || ok=0; done
if [ $ok = 1 ]; then
  for b in main53 betaT p1loop both; do lease_ncu_launches "$b" h64-fixed prepare; done
  lease_ab main53,betaT,p1loop,both 280 h64-fixed h96-fixed h64-mixed
else
  echo "a check failed: no timing"
fi
(cd "$W" && tar -czf "$OUT/checks-all.tgz" .)
date -u
