#!/usr/bin/env bash
# Session 56, call 1: three phase-1 steps against main56 (d8b7889: main with r0reg, ntask and revplan), stacked:
#   cwait (9e59ccf)   [W | U]'s bulk copies waited at the next task's S0 barrier (bits kept)
#   pfahead (9cb0eff) the L2 prefetch's task a round ahead resolved by kTaker at S4 (bits kept)
#   s2half (225a891 on pfahead rebased onto main) S2b a channel pair over half a sub-block (bits change: the running
#                     products restart at the half; judged against the fp64 oracle, not against main56's figures)
#   1  kda-verify --suite full and backward-quick on the four at one seed each, beside s2half's GPU tests (all but
#      decode: the backward's recompute runs S2b too)
#   2  gpu_ab main56 / cwait / pfahead / s2half at h64-fixed and h96-fixed, 2 rounds, every run verified
#   3  phase 1's by-line ncu profile on s2half at h64-fixed in what is left of 560 s
# Run as: OUT=$OUT bash .carry/lease/s56_l1b.sh   (after .carry/slim.sh on: four archives)
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s56_l1b
lease_unpack main56 cwait pfahead s2half
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lease_run gtests s2half 4 200 ./kda_gpu_tests --gtest_filter='-*Decode*' & pg=$!
lease_same_figures full main56 cwait pfahead s2half
wait $pg
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/gtests.log" | head
lease_same_figures backward-quick main56 cwait pfahead s2half
grep -hE " FAIL |stress_near_identical|kda-verify:" "$W"/same-*s2half.log "$W"/same-*main56.log | cut -c1-150
lease_checks_done checks
lease_ab main56,cwait,pfahead,s2half 220 h64-fixed h96-fixed
left=$((565 - SECONDS))
echo "left for ncu: $left s"
if [ $left -gt 60 ]; then
  mkdir -p "$OUT/ncu"
  OUT=$OUT/ncu timeout $left bash scripts/gpu_ab.sh --builds s2half --rounds 0 --ncu prepare_kernel --ncu-count 1 \
    --workload h64-fixed > "$OUT/ncu/gpu_ab.log" 2>&1
  echo "== ncu prepare rc=$?"
  tail -5 "$OUT/ncu/gpu_ab.log"
fi
date -u
