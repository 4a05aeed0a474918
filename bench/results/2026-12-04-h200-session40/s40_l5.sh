#!/usr/bin/env bash
# Session 40, call 5 (~230 s, the budget's last 366 s; call 4 = s40_l4.sh was lost when the machine was taken back
# mid-call, ~290 s of the budget): nofence (56403ac) and both (26db169, nofence plus CS's S0 loads a slice ahead)
# against main40 (2d18a87). Checks on both (it holds nofence's code): the wgmma / backward / stress GPU tests and
# backward-quick (backward-full did not fit the budget); then gpu_ab.sh main40,nofence,both at train-h64-fixed, one
# round.
# Run as: OUT=$OUT bash .carry/lease/s40_l5.sh
#   carry [".carry/lease", ".carry/ab/main40.tar.xz", ".carry/ab/nofence.tar.xz", ".carry/ab/both.tar.xz",
#          ".carry/ab/main40.COMMIT", ".carry/ab/nofence.COMMIT", ".carry/ab/both.COMMIT"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l5
lease_unpack main40 nofence both
pids=()
lease_run wgmma both 2 90 ./kda_gpu_tests --gtest_filter='*Wgmma*' & pids+=($!)
lease_run tests both 6 90 ./kda_gpu_tests --gtest_filter='*Backward*:*Stress*' & pids+=($!)
lease_run bq both 6 90 ./kda-verify --impl cuda-generic --suite backward-quick & pids+=($!)
wait "${pids[@]}"
lease_passed bq && echo "both: bq passed" || echo "both: bq FAILED"
grep -hE "^\[  (FAILED|PASSED) |tests? ran|products P1" "$W/wgmma.log" "$W/tests.log" | head -10
lease_checks_done
mkdir -p "$OUT/ab"
OUT=$OUT/ab timeout 150 bash scripts/gpu_ab.sh --builds main40,nofence,both --impl cuda-generic --rounds 1 \
  --workload train-h64-fixed; echo "gpu_ab rc=$?"
date -u
