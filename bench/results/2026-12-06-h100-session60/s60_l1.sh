#!/usr/bin/env bash
# Session 60, call 1 (session 59's queued s60_l1.sh with the two changes together added). Builds, all on main59 =
# cc92977 (main at the session's start):
#   s3acc2  1873168: a plain forward's diagonal S3 blocks in two accumulator sets (even / odd k-steps)
#   s4r0t   33b43d3 (on ca6fd19): S4's round 0 right-looking on warps 0-1, round 0's barrier among warps 0-3 and the
#           next task taken on warp 4
#   s3s4    3fd9e24: s3acc2's change on s4r0t
#   main59clk, s3s4clk: the measuring builds (stage clocks, format KDACLK2) of main59 and s3s4
# 1  full on the four and backward-quick on main59, s4r0t and s3s4 at one seed each, beside the GPU tests but decode
#    of s3acc2, s4r0t and s3s4
# 2  gpu_ab main59 / s3acc2 / s4r0t / s3s4 at h64-fixed and h96-fixed, 2 rounds, every run verified
# 3  stage clocks of main59clk and s3s4clk at h64-fixed
# Run as OUT=$OUT bash .carry/lease/s60_l1.sh with .carry/slim.sh on, carry [".carry/lease", ".carry/ab"]
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s60_l1
lease_unpack main59 s3acc2 s4r0t s3s4 main59clk s3s4clk
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lease_run gtests-s3acc2 s3acc2 2 220 ./kda_gpu_tests --gtest_filter='-*Decode*' & pg1=$!
lease_run gtests-s4r0t s4r0t 2 220 ./kda_gpu_tests --gtest_filter='-*Decode*' & pg2=$!
lease_run gtests-s3s4 s3s4 2 220 ./kda_gpu_tests --gtest_filter='-*Decode*' & pg3=$!
lease_same_figures full main59 s3acc2 s4r0t s3s4
lease_same_figures backward-quick main59 s4r0t s3s4  # s3acc2 leaves the backward as main's
wait $pg1 $pg2 $pg3
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W"/gtests-*.log | head
grep -hE " FAIL |near_identical_keys|kda-verify:" "$W"/same-full-*.log | cut -c1-150
lease_checks_done checks
echo "checks done at $SECONDS s"
lease_ab main59,s3acc2,s4r0t,s3s4 300 h64-fixed h96-fixed
mkdir -p /tmp/clocks
for b in main59clk s3s4clk; do
  lease_run "clk-$b" "$b" 4 60 ./kda-bench --workload h64-fixed --impl cuda-generic --iters 10 --stage-clocks /tmp/clk-$b
  cp "$W/clk-$b.log" /tmp/clocks/
  python3 scripts/stage_clocks.py "/tmp/clk-$b.cuda-generic.h64-fixed" | tee "/tmp/clocks/stages-$b.txt"
done
tar -czf "$OUT/clocks.tgz" -C /tmp clocks
echo "done at $SECONDS s"
date -u
