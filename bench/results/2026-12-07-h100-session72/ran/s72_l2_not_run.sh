#!/usr/bin/env bash
# Session 72, call 2: tc512 (branch tc512, 356c375: grad_tc's K = 128 halves as the two 256-thread groups of one
# 512-thread CTA, no cluster, in the standalone grad_tc launch; the pipe keeps its clusters) against main72. The
# question is Design A's (docs/backward.md, session 54): do 16 warps of one CTA issue as well as two CTAs of 8 warps?
# train-h96-fixed takes the standalone launch (its reverse pass has a partial wave), train-h64-fixed the pipe (tc512
# level there by construction: the same pipe code).
# Predicted: the same bits (the same sums in the same order); grad_tc at train-h96-fixed within +-3% of main72's.
# Run as OUT=$OUT bash .carry/lease/s72_l2.sh, timeout_s 600, carry [".carry/lease", ".carry/ab"].
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s72_l2
lease_unpack main72 tc512
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lim=${LIMIT:-560}
lease_run btests-tc512 tc512 2 200 ./kda_gpu_tests --gtest_filter='*Backward*:*Stress*' & p1=$!
lease_same_figures backward-quick main72 tc512
wait $p1
grep -hE "^\[  (FAILED|PASSED) |tests? ran|PartialReverseWave" "$W/btests-tc512.log" | head -8
lease_checks_done checks
echo "checks done at $SECONDS s"
for r in 1 2; do
  for b in main72 tc512; do
    lease_ncu "$b" train-h96-fixed grad_tc
    mv "$W/ncu-$b-train-h96-fixed-grad_tc.txt" "$W/ncu-$b-h96-grad_tc-$r.txt"
  done
done
grep -hE "Issue Slots Busy|Issued Warp Per Scheduler|Active Warps Per Scheduler" "$W"/ncu-*-h96-grad_tc-1.txt | cut -c1-100
echo "ncu done at $SECONDS s"
left=$((lim - SECONDS))
[ "$left" -gt 80 ] && lease_ab main72,tc512 "$left" --rounds 2 --dir ab-h96 train-h96-fixed
(cd "$W" && tar -czf "$OUT/final.tgz" .)
echo "done at $SECONDS s"
date -u
