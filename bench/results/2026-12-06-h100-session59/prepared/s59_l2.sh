#!/usr/bin/env bash
# Session 59, call 2 (after call 1: s4r0 level with main, its S4 gain held by warp 8's taker latency; s0bu -0.5%):
#   s0bm    (9c57a16)  S0b's rows fully unrolled, on main: main's bits
#   s3acc2  (4798346)  on s0bm: a plain forward's diagonal S3 blocks in two accumulator sets (A' changes in its last bits)
#   s4r0t   (fcc585b)  on s0bu: s4r0 with round 0's barrier among warps 0-3 and the next task taken on warp 4
# 1  full on main58, s3acc2, s4r0t and backward-quick on main58 and s4r0t at one seed each, beside s3acc2's and s4r0t's GPU tests but decode
# 2  gpu_ab main58 / s0bm / s3acc2 / s4r0t at h64-fixed and h96-fixed, 2 rounds, every run verified
# 3  stage clocks of main58clk and s4r0tclk at h64-fixed, read by scripts/stage_clocks.py as fixed after call 1
#    (a stage ends at its barrier's last arrival: the departure stamps are read before the barrier releases)
# Run as: OUT=$OUT bash .carry/lease/s59_l2.sh, carry [".carry/lease", ".carry/ab"] (.carry/slim.sh on first)
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s59_l2
lease_unpack main58 s0bm s3acc2 s4r0t main58clk s4r0tclk
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lease_run gtests-s3acc2 s3acc2 2 220 ./kda_gpu_tests --gtest_filter='-*Decode*' & pg1=$!
lease_run gtests-s4r0t s4r0t 2 220 ./kda_gpu_tests --gtest_filter='-*Decode*' & pg2=$!
lease_same_figures full main58 s3acc2 s4r0t  # s0bm: call 1 gave s0bu s4r0's figures row for row
lease_same_figures backward-quick main58 s4r0t  # s0bm and s3acc2 leave the backward as main
wait $pg1 $pg2
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W"/gtests-*.log | head
grep -hE " FAIL |near_identical_keys|kda-verify:" "$W"/same-full-*.log | cut -c1-150
lease_checks_done checks
echo "checks done at $SECONDS s"
lease_ab main58,s0bm,s3acc2,s4r0t 300 h64-fixed h96-fixed
mkdir -p /tmp/clocks
for b in main58clk s4r0tclk; do
  lease_run "clk-$b" "$b" 4 60 ./kda-bench --workload h64-fixed --impl cuda-generic --iters 10 --stage-clocks /tmp/clk-$b
  cp "$W/clk-$b.log" /tmp/clocks/
  python3 scripts/stage_clocks.py "/tmp/clk-$b.cuda-generic.h64-fixed" | tee "/tmp/clocks/stages-$b.txt"
done
tar -czf "$OUT/clocks.tgz" -C /tmp clocks
date -u
