#!/usr/bin/env bash
# Session 57, call 4 (~500 s of budget left, a cold start): two phase-1 steps prepared this session, stacked on s2half
# (225a891, main's kernels):
#   rowload (31f87b0) load_rows: a live row's pointers formed once, its loads back to back under one branch
#   rowload2 (7073687, on rowload) dt_bias loaded with the next task's rows
# Both keep every bit: kda-verify full (three builds) and backward-quick (s2half, rowload2) at one seed each, the
# same figures expected; rowload2's GPU tests but decode beside; then gpu_ab, 2 rounds, every run verified, in what is
# left of ~370 s.
# Run as: OUT=$OUT bash .carry/lease/s57_l4.sh, carry [".carry/lease", ".carry/ab"] (.carry/ab: those three archives)
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s57_l4
lease_unpack s2half rowload rowload2
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lease_run gtests rowload2 4 170 ./kda_gpu_tests --gtest_filter='-*Decode*' & pg=$!
lease_same_figures full s2half rowload rowload2
lease_same_figures backward-quick s2half rowload2
wait $pg
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/gtests.log" | head
grep -hE " FAIL |stress_near_identical_keys_beta|kda-verify:" "$W"/same-full-*.log | cut -c1-150
lease_checks_done checks
left=$((370 - SECONDS))
echo "left for gpu_ab: $left s"
lease_ab s2half,rowload,rowload2 $left h64-fixed h96-fixed train-h64-fixed
date -u
