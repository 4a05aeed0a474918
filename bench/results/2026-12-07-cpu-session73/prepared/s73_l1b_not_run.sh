#!/usr/bin/env bash
# Session 73, call 1 (session 72's prepared s73_l1.sh with tc512p added): Design A's steps 1 and 2 at once.
#   main72 (7b65214): main's kernels;
#   tc512  (branch tc512, a13982a): grad_tc's K = 128 halves as the two 256-thread groups of one 512-thread CTA
#          (grad_tc_task.cuh CtaPair) in the standalone grad_tc launch (train-h96-fixed's path);
#   tc512s (branch tc512s, f07efa5): tc512 with one copy of dM / dA for both groups (173 KB a CTA);
#   tc512p (branch tc512p, 84ec906): tc512s with dM and dA packed into one [64][64] array (CtaLayout: 119 KB a CTA,
#          room for a task's 96 KB of QS / KD / BK tiles beside it), dA stored transposed through registers, the
#          diagonal blocks' k-steps masked; the pipe kernel's SASS equal to main's.
# Predicted: the same bits on all four; grad_tc at train-h96-fixed within +-3% of main72's for tc512 / tc512s, tc512p
# within ~1% of tc512s (its copy's register path and masks against 16 KB less shared memory traffic).
# Run as OUT=$OUT bash .carry/lease/s73_l1b.sh, timeout_s 600, carry [".carry/lease", ".carry/ab"]; move bench/results
# out of the tree for the call and back after it.
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s73_l1b
lease_unpack main72 tc512 tc512s tc512p
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lim=${LIMIT:-560}
pids=()
for b in tc512 tc512s tc512p; do
  lease_run "btests-$b" "$b" 2 200 ./kda_gpu_tests --gtest_filter='*Backward*:*Stress*' & pids+=($!)
done
lease_same_figures backward-quick main72 tc512 tc512s tc512p
wait "${pids[@]}"
for b in tc512 tc512s tc512p; do
  echo "$b: $(grep -hE "^\[  (FAILED|PASSED) " "$W/btests-$b.log" | head -3 | tr '\n' ' ')"
  grep -hE "PartialReverseWave" "$W/btests-$b.log" | head -2
done
lease_checks_done checks
echo "checks done at $SECONDS s"
for r in 1 2; do
  for b in main72 tc512 tc512s tc512p; do
    lease_ncu "$b" train-h96-fixed grad_tc
    mv "$W/ncu-$b-train-h96-fixed-grad_tc.txt" "$W/ncu-$b-h96-grad_tc-$r.txt"
  done
done
grep -HE "Issue Slots Busy|Issued Warp Per Scheduler|Active Warps Per Scheduler" "$W"/ncu-*-h96-grad_tc-1.txt | cut -c1-120
echo "ncu done at $SECONDS s"
left=$((lim - SECONDS))
[ "$left" -gt 100 ] && lease_ab main72,tc512,tc512s,tc512p "$left" --rounds 1 --dir ab-h96 train-h96-fixed
left=$((lim - SECONDS))
[ "$left" -gt 170 ] && lease_ab main72,tc512s,tc512p "$left" --rounds 1 --dir ab-h96-2 train-h96-fixed
(cd "$W" && tar -czf "$OUT/final.tgz" .)
echo "done at $SECONDS s"
date -u
