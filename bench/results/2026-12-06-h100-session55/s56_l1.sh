#!/usr/bin/env bash
# Queued in session 55 for the next device call, two phase-1 steps meant to keep every bit, against main56 (d8b7889:
# main with r0reg, ntask and revplan):
#   cwait (9e59ccf) [W | U]'s bulk copies waited at the next task's S0 barrier, not by a CTA barrier at the task's end
#   pfahead (9cb0eff, on cwait) the L2 prefetch's task a round ahead resolved by kTaker at S4, read from shared memory
#   1  kda-verify --suite full and backward-quick on the three at one seed each (the same figures, row for row?)
#      beside pfahead's forward GPU tests
#   2  gpu_ab main56 / cwait / pfahead at h64-fixed and h96-fixed, 2 rounds, every run verified (the GPU alone)
#   3  phase 1's by-line ncu profile on pfahead at h64-fixed (the next step's evidence; read as session 55's was)
# ~420 s + start. Run as: OUT=$OUT bash .carry/lease/s56_l1.sh
# carry [".carry/lease", ".carry/ab/main56.tar.xz", ".carry/ab/main56.COMMIT", ".carry/ab/cwait.tar.xz",
#        ".carry/ab/cwait.COMMIT", ".carry/ab/pfahead.tar.xz", ".carry/ab/pfahead.COMMIT"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s56_l1
lease_unpack main56 cwait pfahead
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lease_run gtests pfahead 4 200 ./kda_gpu_tests --gtest_filter='-*Backward*:*Stress*:*Decode*' & pg=$!
lease_same_figures full main56 cwait pfahead
wait $pg
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/gtests.log" | head
lease_same_figures backward-quick main56 cwait pfahead
lease_checks_done checks
lease_ab main56,cwait,pfahead 200 h64-fixed h96-fixed
mkdir -p "$OUT/ncu"
OUT=$OUT/ncu timeout 150 bash scripts/gpu_ab.sh --builds pfahead --rounds 0 --ncu prepare_kernel --ncu-count 1 \
  --workload h64-fixed > "$OUT/ncu/gpu_ab.log" 2>&1
echo "== ncu prepare rc=$?"
tail -5 "$OUT/ncu/gpu_ab.log"
date -u
