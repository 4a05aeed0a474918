#!/usr/bin/env bash
# Prepared in session 69 as the next session's second call. dsmx (branch, 07bc664 on main): grad_tc's K = 128 halves
# exchange their rows' partial dots by one bulk copy (cp.async.bulk shared::cta -> shared::cluster) completing on the
# receiver's mbarrier, instead of two cluster barriers (the release arrive a MEMBAR.ALL.GPU: 3.1% of the kernel's stall
# samples, its wait 2.4%, ncu session 69 call 4); one relaxed arrive at the task's start orders the mbarriers' setup.
# The same sums in the same order: bit-identical. Predicted: grad_tc -2..-5%.
# Before the call: .carry/ab holds main68py and dsmx (mv .carry/shelf/dsmx.* .carry/ab/; the other candidates out, the
# carry is 64 MiB at most). Run as OUT=$OUT bash .carry/lease/s70_l2.sh with .carry/slim.sh on, carry
# [".carry/lease", ".carry/ab"] (LIMIT below the budget left); returns s70_l2.log, final.tgz, ab/results.tar.
# 1  checks: backward-quick at one seed beside main68py (the same figures), dsmx's backward / stress GPU tests, then
#    backward-full on dsmx;
# 2  ncu of grad_tc's launches in one train-h64-fixed step, both builds;
# 3  gpu_ab main68py,dsmx at train-h64-fixed, 2 rounds.
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s70_l2
lease_unpack main68py dsmx
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lim=${LIMIT:-560}
lease_run btests-dx dsmx 4 150 ./kda_gpu_tests --gtest_filter='*Backward*:*Stress*' & pt=$!
lease_same_figures backward-quick main68py dsmx
wait $pt
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/btests-dx.log" | head -5
echo "checks done at $SECONDS s"
lease_checks_done final
if lease_passed same-backward-quick-dsmx; then
  lease_bwd_full dsmx
  for n in bwdfull-a bwdfull-b bwdfull-c bwdfull-d; do lease_passed $n && echo "dsmx: $n passed" || echo "dsmx: $n FAILED"; done
  echo "backward-full done at $SECONDS s"
  lease_checks_done final
fi
for b in main68py dsmx; do lease_ncu_launches "$b" train-h64-fixed 'grad_tc'; done
echo "ncu done at $SECONDS s"
left=$((lim - SECONDS - 15))
[ "$left" -gt 240 ] && left=240
[ "$left" -gt 60 ] && lease_ab main68py,dsmx "$left" train-h64-fixed
(cd "$W" && tar -czf "$OUT/final.tgz" .)
echo "done at $SECONDS s"
date -u
