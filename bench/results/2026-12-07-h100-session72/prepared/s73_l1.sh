#!/usr/bin/env bash
# Prepared in session 72 as the next session's first call (session 72's device budget ran out in starts that found no
# machine). Builds (scripts/gpu_build.sh --ab NAME in a checkout of each; a new checkout has none: rebuild first, the
# branch or the patch applied to main):
#   main72 (7b65214 or later main): main's kernels;
#   tc512  (branch tc512, a13982a, patches/tc512.diff): grad_tc's K = 128 halves as the two 256-thread groups of one
#          512-thread CTA (grad_tc_task.cuh CtaPair, no cluster) in the standalone grad_tc launch; the pipe's and the
#          other grad_tc kernels' SASS equal main's;
#   tc512s (branch tc512s, f07efa5, patches/tc512s.diff): tc512 with one copy of dM / dA for both groups.
# The question is Design A's (docs/backward.md, sessions 54 and 72): do 16 warps of one CTA issue grad_tc's work as well
# as two CTAs of 8 warps an SM? train-h96-fixed takes the standalone launch (its reverse pass has a partial wave).
# Predicted: the same bits (the same sums in the same order); grad_tc at train-h96-fixed within +-3% of main72's,
# tc512s at or under tc512 (32 KB a task less from L2).
# Run as OUT=$OUT bash .carry/lease/s73_l1.sh, timeout_s 600, carry [".carry/lease", ".carry/ab"]; move bench/results
# out of the tree for the call and back after it.
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s73_l1
lease_unpack main72 tc512 tc512s
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lim=${LIMIT:-560}
lease_run btests-tc512 tc512 2 200 ./kda_gpu_tests --gtest_filter='*Backward*:*Stress*' & p1=$!
lease_run btests-tc512s tc512s 2 200 ./kda_gpu_tests --gtest_filter='*Backward*:*Stress*' & p2=$!
lease_same_figures backward-quick main72 tc512 tc512s
wait $p1 $p2
for b in tc512 tc512s; do
  echo "$b: $(grep -hE "^\[  (FAILED|PASSED) " "$W/btests-$b.log" | head -3 | tr '\n' ' ')"
  grep -hE "PartialReverseWave" "$W/btests-$b.log" | head -2
done
lease_checks_done checks
echo "checks done at $SECONDS s"
for r in 1 2; do
  for b in main72 tc512 tc512s; do
    lease_ncu "$b" train-h96-fixed grad_tc
    mv "$W/ncu-$b-train-h96-fixed-grad_tc.txt" "$W/ncu-$b-h96-grad_tc-$r.txt"
  done
done
grep -HE "Issue Slots Busy|Issued Warp Per Scheduler|Active Warps Per Scheduler" "$W"/ncu-*-h96-grad_tc-1.txt | cut -c1-120
echo "ncu done at $SECONDS s"
left=$((lim - SECONDS))
[ "$left" -gt 80 ] && lease_ab main72,tc512,tc512s "$left" --rounds 1 --dir ab-h96 train-h96-fixed
(cd "$W" && tar -czf "$OUT/final.tgz" .)
echo "done at $SECONDS s"
date -u
