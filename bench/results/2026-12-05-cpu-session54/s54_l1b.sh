#!/usr/bin/env bash
# Session 54, call 1 for a short budget (no ncu, three builds timed at two workloads, ~380 s): session 53's s53_l1.sh (its header says what each step checks and predicts) on the same four
# builds rebuilt at sm_90a alone, which fit a call without taking bench/results out of the tree: main53s = e85ce36,
# betaTs = 751965a, p1loops = 1455544, boths = b21aff3 (each differs from its commit only in CMake's architecture
# list). ~450 s + start. Run as: OUT=$OUT bash .carry/lease/s54_l1.sh
# carry [".carry/lease", ".carry/ab/main53s.tar.xz", ".carry/ab/betaTs.tar.xz", ".carry/ab/p1loops.tar.xz",
#        ".carry/ab/boths.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s54_l1b
lease_unpack main53s betaTs p1loops boths
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lease_run gtests boths 4 240 ./kda_gpu_tests --gtest_filter='-*Backward*:*Stress*:*Decode*' & pg=$!
lease_same_figures full main53s boths
wait $pg
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/gtests.log" | head
grep -hE " FAIL |near_identical_keys_beta_at_2|beta_at_2_negative" "$W/same-full-boths.log" | cut -c1-150
lease_same_figures quick main53s p1loops & pq=$!
lease_bwd_quick p1loops
wait $pq
ok=1
for n in same-full-boths same-quick-p1loops bq; do lease_passed "$n" || ok=0; done
for n in gtests tests; do grep -q "^\[  PASSED  \]" "$W/$n.log" && ! grep -q "^\[  FAILED  \]" "$W/$n.log" || ok=0; done
if [ $ok = 1 ]; then
  lease_ab main53s,p1loops,boths 200 h64-fixed h96-fixed
else
  echo "a check failed: no timing"
fi
(cd "$W" && tar -czf "$OUT/checks-all.tgz" .)
date -u
