#!/usr/bin/env bash
# Session 55, call 2: two phase-1 steps against main55 (873a96c), each meant to keep every bit:
#   r0reg (9ff3f4c) S4's round 0 with the quad's T column in registers
#   ntask (2e2ba80, on r0reg) the next task taken at a task's start and resolved at S4's wait, not at S5c
#   1  kda-verify --suite full on all three at one seed (the same figures, row for row?) beside ntask's forward GPU
#      tests; then backward-quick the same way (the backward's recompute runs the same kernel)
#   2  gpu_ab main55 / r0reg / ntask at h64-fixed and h96-fixed, 2 rounds, every run verified (the GPU alone)
#   3  ncu launches of r0reg's and ntask's forward at h64-fixed (prepare_kernel beside main55's 1.13 ms, call 1)
# and, beside 1's backward-quick, revplan55 (8d29192, call 1 timed it: train-h16-32k's backward -10%): backward-full
# whole (lease_bwd_full), what a backward change passes before it lands.
# ~470 s + start. Run as: OUT=$OUT bash .carry/lease/s55_l2.sh
# carry [".carry/lease", ".carry/ab/main55.tar.xz", ".carry/ab/main55.COMMIT", ".carry/ab/r0reg.tar.xz",
#        ".carry/ab/r0reg.COMMIT", ".carry/ab/ntask.tar.xz", ".carry/ab/ntask.COMMIT", ".carry/ab/revplan55.tar.xz",
#        ".carry/ab/revplan55.COMMIT"]  (with .carry/slim.sh on: four archives and the tracked tree exceed 64 MiB)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s55_l2
lease_unpack main55 r0reg ntask revplan55
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lease_run gtests ntask 4 200 ./kda_gpu_tests --gtest_filter='-*Backward*:*Stress*:*Decode*' & pg=$!
lease_same_figures full main55 r0reg ntask
wait $pg
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/gtests.log" | head
grep -hE "near_identical_keys_beta_at_2|kda-verify:" "$W"/same-full-*.log | cut -c1-200
lease_bwd_full revplan55 & pb=$!
lease_same_figures backward-quick main55 r0reg ntask
wait $pb
for n in bwdfull-a bwdfull-b bwdfull-c bwdfull-d; do
  lease_passed $n && echo "revplan55: $n passed" || echo "revplan55: $n FAILED"
done
grep -hE "^bwd_" "$W"/bwdfull-*.log | cut -c1-160
lease_checks_done checks
date -u
lease_ab main55,r0reg,ntask 200 h64-fixed h96-fixed
lease_ncu_launches r0reg h64-fixed prepare
lease_ncu_launches ntask h64-fixed prepare
date -u
