#!/usr/bin/env bash
# Session 68, call 2. Call 1 (s68_l1.sh) refuted session 67's reading: with the output warpgroup's products held until
# the chain's were done (outwait), the chain's products took as long as beside them (phase A 1004 cycles, B 1136,
# against 1003 / 1139), so they do not wait on shared tensor cores. What is left on the chain's path is its own work
# around the products. Candidates (--stage-clocks builds on main's kernels, bit-identical by construction):
#   uaheadclk (29d6089, branch uahead, never run): the chain's U loads issued while W S^T runs;
#   aheadclk (branch ahead, uahead on main + the decay in group A): S scaled by the decay while W S^T runs too, so phase
#   B's product is issued right after its barrier.
# 1  checks of aheadclk (full, backward-quick: the saving instances changed too; GPU tests but backward / stress /
#    decode) and uaheadclk (full), in parallel;
# 2  state-pass clocks of stateclk, uaheadclk, aheadclk at h64- and h96-fixed;
# 3  gpu_ab of the three, 2 rounds;
# 4  ncu: every launch of one train-h64-fixed kda-bench step on main63 (where issue #9's step goes on an H100).
# Run as OUT=$OUT bash .carry/lease/s68_l2.sh with .carry/slim.sh on, timeout_s 600, carry [".carry/lease", ".carry/ab"]
# (.carry/ab: main63, stateclk, uaheadclk, aheadclk); returns s68_l2.log, final.tgz, clocks.tgz, ab/results.tar,
# ncu-train.txt.
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s68_l2
lease_unpack stateclk uaheadclk aheadclk main63
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lim=${LIMIT:-540}
pids=()
lease_run full-ah aheadclk 3 200 ./kda-verify --impl cuda-generic --suite full & pids+=($!)
lease_run bq-ah aheadclk 3 200 ./kda-verify --impl cuda-generic --suite backward-quick & pids+=($!)
lease_run gtests-ah aheadclk 3 200 ./kda_gpu_tests --gtest_filter='-*Backward*:*Stress*:*Decode*' & pids+=($!)
lease_run full-ua uaheadclk 3 200 ./kda-verify --impl cuda-generic --suite full & pids+=($!)
wait "${pids[@]}"
echo "checks done at $SECONDS s"
grep -hE " FAIL |kda-verify:" "$W/full-ah.log" "$W/bq-ah.log" "$W/full-ua.log" | cut -c1-200 | head -8
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/gtests-ah.log" | head -5
lease_checks_done final
builds=stateclk
lease_passed full-ua && builds=$builds,uaheadclk
lease_passed full-ah && lease_passed bq-ah && builds=$builds,aheadclk
for b in ${builds//,/ }; do lease_clocks "$b" h64-fixed h96-fixed; done
echo "clocks done at $SECONDS s"
left=$((lim - SECONDS - 110))
[ "$left" -gt 160 ] && left=160
[ "$left" -gt 40 ] && lease_ab "$builds" "$left" h64-fixed h96-fixed
left=$((lim - SECONDS))
if [ "$left" -gt 60 ]; then
  lease_ncu_launches main63 train-h64-fixed '.*'
  cp "$W/ncu-launches-main63-train-h64-fixed.txt" "$OUT/ncu-train.txt"
fi
echo "done at $SECONDS s"
date -u
