#!/usr/bin/env bash
# Session 44, call 2 (~480 s): tcloop (main with grad_tc's fragment offsets formed once before the k-step loops) and
# both (tcloop + rvdo: the reverse pass's dO' rows loaded a chunk ahead, stored at fixed plane offsets) against main.
# Checks on both (it holds both changes): the wgmma layout tests (the new DoutPlaneOffset check), the backward / stress
# GPU tests and backward-full whole; then gpu_ab.sh main,tcloop,both at train-h64-fixed, two rounds, and ncu's full
# set with source of the first three grad_tc / reverse_wgmma launches of main and both.
# Run as: OUT=$OUT bash .carry/lease/s44_l2.sh        carry [".carry/lease", ".carry/ab"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l2
lease_unpack main tcloop both
lease_run layout both 2 60 ./kda_gpu_tests --gtest_filter='WgmmaStateLayout.*:WgmmaLayout.*'
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/layout.log"
lease_bwd_checks both
lease_checks_done
lease_ab main,tcloop,both 300 train-h64-fixed
OUT=$OUT timeout 150 bash scripts/gpu_ab.sh --builds main,both --rounds 0 --ncu-count 3 --ncu 'grad_tc|reverse_wgmma' \
  --workload train-h64-fixed
echo "ncu rc=$?"
date -u
