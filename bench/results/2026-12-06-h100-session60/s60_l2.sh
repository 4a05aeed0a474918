#!/usr/bin/env bash
# Session 60, call 2. Builds:
#   main60  33b43d3 (main: s4r0t landed after call 1)
#   s4acc   2acd9dd: S4's block products with 3xTF32's three terms in three accumulator sets (T's last bits move)
#   s3ibs   064adbd: S3's factored diagonal blocks take exp2(-S_b) from a table S2a fills (the same bits)
#   s4s3    4f65b8b: both; s4s3clk its measuring build
# 1  full on the four (one seed) beside the GPU tests but decode of s4acc, s3ibs and s4s3
# 2  backward-quick on the four (one seed) beside backward-full on s4s3
# 3  gpu_ab main60 / s4acc / s3ibs / s4s3 at h64-fixed and h96-fixed, 2 rounds, every run verified
# 4  stage clocks of s4s3clk at h64-fixed
# Run as OUT=$OUT bash .carry/lease/s60_l2.sh with .carry/slim.sh on, carry [".carry/lease", ".carry/ab"]
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s60_l2
lease_unpack main60 s4acc s3ibs s4s3 s4s3clk
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lease_run gtests-s4acc s4acc 2 220 ./kda_gpu_tests --gtest_filter='-*Decode*' & pg1=$!
lease_run gtests-s3ibs s3ibs 2 220 ./kda_gpu_tests --gtest_filter='-*Decode*' & pg2=$!
lease_run gtests-s4s3 s4s3 2 220 ./kda_gpu_tests --gtest_filter='-*Decode*' & pg3=$!
lease_same_figures full main60 s4acc s3ibs s4s3
wait $pg1 $pg2 $pg3
echo "full and GPU tests done at $SECONDS s"
lease_bwd_full s4s3 & pb=$!
lease_same_figures backward-quick main60 s4acc s3ibs s4s3
wait $pb
for n in bwdfull-a bwdfull-b bwdfull-c bwdfull-d; do
  lease_passed $n && echo "s4s3: $n passed" || echo "s4s3: $n FAILED"
done
grep -hE "^bwd_" "$W"/bwdfull-*.log | cut -c1-160
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W"/gtests-*.log | head
grep -hE " FAIL |near_identical_keys|kda-verify:" "$W"/same-full-*.log | cut -c1-150
lease_checks_done checks
echo "checks done at $SECONDS s"
lease_ab main60,s4acc,s3ibs,s4s3 300 h64-fixed h96-fixed
mkdir -p /tmp/clocks
for b in s4s3clk; do
  lease_run "clk-$b" "$b" 4 60 ./kda-bench --workload h64-fixed --impl cuda-generic --iters 10 --stage-clocks /tmp/clk-$b
  cp "$W/clk-$b.log" /tmp/clocks/
  python3 scripts/stage_clocks.py "/tmp/clk-$b.cuda-generic.h64-fixed" | tee "/tmp/clocks/stages-$b.txt"
done
tar -czf "$OUT/clocks.tgz" -C /tmp clocks
echo "done at $SECONDS s"
date -u
