#!/usr/bin/env bash
# Queued in session 59 (its call 2 never started): on main59 (main with S0b unrolled, 05c6453 or later),
#   s3acc2  git am s3acc2.patch: a plain forward's diagonal S3 blocks in two accumulator sets (A' changes in its last
#           bits; the backward's recompute as before)
#   s4r0t   git am s4r0.patch s4r0t-on-s0bu.patch: S4's round 0 right-looking on warps 0-1, round 0's barrier among
#           warps 0-3 and the next task taken on warp 4 (T changes in its last bits, as s4r0 in session 59's call 1)
# 1  full on the three and backward-quick on main59 and s4r0t at one seed each, beside both changes' GPU tests but
#    decode
# 2  gpu_ab main59 / s3acc2 / s4r0t at h64-fixed and h96-fixed, 2 rounds, every run verified
# 3  stage clocks (format KDACLK2: arrivals only) of main59clk, s3acc2clk and s4r0tclk at h64-fixed
# Build the six archives first (scripts/gpu_build.sh --ab NAME and --stage-clocks --ab NAMEclk on each branch),
# then .carry/slim.sh on (it moves bench/results out; see session 59's README), and run as:
#   OUT=$OUT bash .carry/lease/s60_l1.sh, carry [".carry/lease", ".carry/ab"]
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s60_l1
lease_unpack main59 s3acc2 s4r0t main59clk s3acc2clk s4r0tclk
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lease_run gtests-s3acc2 s3acc2 2 220 ./kda_gpu_tests --gtest_filter='-*Decode*' & pg1=$!
lease_run gtests-s4r0t s4r0t 2 220 ./kda_gpu_tests --gtest_filter='-*Decode*' & pg2=$!
lease_same_figures full main59 s3acc2 s4r0t
lease_same_figures backward-quick main59 s4r0t  # s3acc2 leaves the backward as main
wait $pg1 $pg2
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W"/gtests-*.log | head
grep -hE " FAIL |near_identical_keys|kda-verify:" "$W"/same-full-*.log | cut -c1-150
lease_checks_done checks
echo "checks done at $SECONDS s"
lease_ab main59,s3acc2,s4r0t 250 h64-fixed h96-fixed
mkdir -p /tmp/clocks
for b in main59clk s3acc2clk s4r0tclk; do
  lease_run "clk-$b" "$b" 4 60 ./kda-bench --workload h64-fixed --impl cuda-generic --iters 10 --stage-clocks /tmp/clk-$b
  cp "$W/clk-$b.log" /tmp/clocks/
  python3 scripts/stage_clocks.py "/tmp/clk-$b.cuda-generic.h64-fixed" | tee "/tmp/clocks/stages-$b.txt"
done
tar -czf "$OUT/clocks.tgz" -C /tmp clocks
date -u
