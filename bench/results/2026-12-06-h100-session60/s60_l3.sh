#!/usr/bin/env bash
# Session 60, call 3. Builds: main60 = 33b43d3 (main), s0beta = c61911c: beta's raw bits
# carried from load_rows to S0 and converted there (the same bits).
# 1  full and backward-quick on both (one seed each) beside s0beta's GPU tests but decode
# 2  gpu_ab main60 / s0beta at h64-fixed and h96-fixed, 2 rounds, every run verified
# Run as OUT=$OUT bash .carry/lease/s60_l3.sh with .carry/slim.sh on, carry [".carry/lease", ".carry/ab"]
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s60_l3
lease_unpack main60 s0beta
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lease_run gtests-s0beta s0beta 4 220 ./kda_gpu_tests --gtest_filter='-*Decode*' & pg1=$!
lease_same_figures full main60 s0beta
lease_same_figures backward-quick main60 s0beta
wait $pg1
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W"/gtests-*.log | head
grep -hE " FAIL |near_identical_keys_beta_at_2|kda-verify:" "$W"/same-full-*.log | cut -c1-150
lease_checks_done checks
echo "checks done at $SECONDS s"
lease_ab main60,s0beta 200 h64-fixed h96-fixed
echo "done at $SECONDS s"
date -u
