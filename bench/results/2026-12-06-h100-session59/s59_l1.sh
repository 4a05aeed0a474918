#!/usr/bin/env bash
# Session 59, call 1: S4's round 0 as a right-looking substitution (s4r0 = fd17111) and, on it, S0b's gate rows fully
# unrolled (s0bu = 9d649a9), against main's kernels (main58 = 5881c86: the kernels of 09245a1):
#   1  kda-verify --suite full and backward-quick on the three at one seed each (s4r0's figures change in their last
#      digits: each T_rc's terms are summed in ascending j; s0bu must give s4r0's row for row), beside both changes'
#      GPU tests but decode
#   2  gpu_ab main58 / s4r0 / s0bu at h64-fixed and h96-fixed, 2 rounds, every run verified
#   3  stage clocks of the three measuring builds (main58clk, s4r0clk, s0buclk) at h64-fixed: S4's and S0b's cycles
#   4  train-h64-fixed, 1 round each, in what is left of ~540 s
# Run as: OUT=$OUT bash .carry/lease/s59_l1.sh, carry [".carry/lease", ".carry/ab"] (.carry/slim.sh on first, so the
# working tree fits 64 MiB)
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s59_l1
lease_unpack main58 s4r0 s0bu main58clk s4r0clk s0buclk
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lease_run gtests-s4r0 s4r0 2 220 ./kda_gpu_tests --gtest_filter='-*Decode*' & pg1=$!
lease_run gtests-s0bu s0bu 2 220 ./kda_gpu_tests --gtest_filter='-*Decode*' & pg2=$!
lease_same_figures full main58 s4r0 s0bu
lease_same_figures backward-quick main58 s4r0 s0bu
wait $pg1 $pg2
for t in full backward-quick; do
  diff <(grep -E " PASS | FAIL " "$W/same-$t-s4r0.log" | cut -c1-120) \
    <(grep -E " PASS | FAIL " "$W/same-$t-s0bu.log" | cut -c1-120) > /dev/null &&
    echo "s0bu: the same $t figures as s4r0" || echo "s0bu: $t figures DIFFER from s4r0"
done
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W"/gtests-*.log | head
grep -hE " FAIL |near_identical_keys|kda-verify:" "$W"/same-full-*.log | cut -c1-150
lease_checks_done checks
echo "checks done at $SECONDS s"
lease_ab main58,s4r0,s0bu 250 h64-fixed h96-fixed
# The tables also go to this call's log; the call brings back 8 files at most, so the clocks' files travel as one.
mkdir -p /tmp/clocks
for b in main58clk s4r0clk s0buclk; do
  lease_run "clk-$b" "$b" 4 60 ./kda-bench --workload h64-fixed --impl cuda-generic --iters 10 --stage-clocks /tmp/clk-$b
  cp "$W/clk-$b.log" /tmp/clocks/
  python3 scripts/stage_clocks.py "/tmp/clk-$b.cuda-generic.h64-fixed" | tee "/tmp/clocks/stages-$b.txt"
done
tar -czf "$OUT/clocks.tgz" -C /tmp clocks
left=$((560 - SECONDS))
echo "left for the training step: $left s"
if [ $left -gt 60 ]; then
  mkdir -p "$OUT/train"
  OUT=$OUT/train timeout $left bash scripts/gpu_ab.sh --builds main58,s4r0,s0bu --impl cuda-generic --rounds 1 \
    --workload train-h64-fixed > "$OUT/train/ab.log" 2>&1
  echo "== train rc=$?"
  grep -E "^== |backward median" "$OUT/train/ab.log"
fi
date -u
