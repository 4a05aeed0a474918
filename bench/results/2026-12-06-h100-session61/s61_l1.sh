#!/usr/bin/env bash
# Prepared in session 60 for the next session's first call. Builds (scripts/gpu_build.sh):
#   main61     --ab main61 on main (kernels as c61911c)
#   s0cpk      --ab s0cpk on eaea780 (`git am prepared/s0cpk.patch` on main): the next task's q / k rows by
#              cp.async into Kr's buffer from S4's end, not by load_rows at S5c (the same bits by construction)
#   main62clk, s0cpkclk  --stage-clocks of each: S0's marks (KDACLK3: mark 1 the rows staged, mark 2 the previous
#              task's bulk copies read out) say which of the two S0's barrier waits for, before and after
# 1  full and backward-quick on main61 and s0cpk (one seed each: the same figures expected) beside s0cpk's GPU tests
#    but decode
# 2  gpu_ab main61 / s0cpk at h64-fixed and h96-fixed, 2 rounds, every run verified
# 3  stage clocks of main62clk and s0cpkclk at h64-fixed
# With .carry/slim.sh on (session 59's prepared/slim.sh), run as OUT=$OUT bash .carry/lease/s61_l1.sh,
# carry [".carry/lease", ".carry/ab"]; ~250 s.
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s61_l1
lease_unpack main61 s0cpk main62clk s0cpkclk
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lease_run gtests-s0cpk s0cpk 4 220 ./kda_gpu_tests --gtest_filter='-*Decode*' & pg=$!
lease_same_figures full main61 s0cpk
lease_same_figures backward-quick main61 s0cpk
wait $pg
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W"/gtests-*.log | head
lease_checks_done checks
echo "checks done at $SECONDS s"
lease_ab main61,s0cpk 200 h64-fixed h96-fixed
lease_clocks main62clk h64-fixed
lease_clocks s0cpkclk h64-fixed
echo "done at $SECONDS s"
date -u
