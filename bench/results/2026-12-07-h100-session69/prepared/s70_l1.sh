#!/usr/bin/env bash
# Prepared in session 69 as the next first call (its last call was refused: too little budget to start a machine).
# Three candidates for the backward's gradient pass, each bit-identical by construction, beside main68py (b41cf9c:
# main's kernels, --python):
#   ring3 (branch, on main): the products kernel's wgmma P1 with a slice ring three slots deep instead of two (two
#     slices in flight while one is multiplied; its slot waits held 18% of the kernel's stall samples, session 69 call
#     4); dO' / dW's planes at the front of shared memory, CS's partials in a region of their own: 114,712 bytes a CTA,
#     two an SM. Session 69's occ1 (one CTA an SM: +12% only) says the kernel is mostly bound by bytes: a few % at most.
#   l2fuse (branch, on pipe): session 69's pipe (products and grad_tc in one launch, clusters taking tickets; level)
#     with the product tiles kept in L2 between the two (stored with the default policy, not streamed out) and dM and
#     the QS / BK columns discarded from L2 after a tame task's stage (never written back): up to ~200 KB a task of DRAM
#     traffic less (~1.6 GB a train-h64-fixed step), if L2 holds a wave's tiles.
#   l2rows (branch, on l2fuse): grad_rows' per-row finishing as a third kind of job in the same launch, a quarter wave
#     of tickets after the stages, reading d g_log, BV, dA from L2 and discarding them after: ~160 KB a task less
#     again, if the same holds.
# 1  checks: backward-quick at one seed, main68py beside the three (the same figures), their backward / stress (and
#    ring3's wgmma) GPU tests;
# 2  ncu of the gradient pass's launches in one train-h64-fixed step, the four builds (and DRAM throughput);
# 3  gpu_ab main68py,ring3,l2fuse,l2rows at train-h64-fixed (one round fits);
# 4  on an H200 with time left: the six prefill workloads beside FLA through main68py's op.
# backward-full runs on a build only once it shows a gain (the next call). Run as OUT=$OUT bash .carry/lease/s70_l1.sh
# with .carry/slim.sh on and timeout_s 600, carry [".carry/lease", ".carry/ab", ".whl", ".carry/triton"] (LIMIT below
# the budget left); returns s70_l1.log, final.tgz, ab/results.tar and on an H200 prefill.tgz and the Triton cache's
# parts.
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s70_l1
lease_unpack main68py ring3 l2fuse l2rows
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lim=${LIMIT:-560}
h200=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -c H200)
lease_run btests-r3 ring3 2 150 ./kda_gpu_tests --gtest_filter='*Backward*:*Stress*:*Wgmma*' & p1=$!
lease_run btests-l2 l2fuse 2 150 ./kda_gpu_tests --gtest_filter='*Backward*:*Stress*' & p2=$!
lease_run btests-lr l2rows 2 150 ./kda_gpu_tests --gtest_filter='*Backward*:*Stress*' & p3=$!
lease_same_figures backward-quick main68py ring3 l2fuse l2rows
wait $p1 $p2 $p3
for n in btests-r3 btests-l2 btests-lr; do grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/$n.log" | head -3; done
echo "checks done at $SECONDS s"
lease_checks_done final
for b in main68py ring3 l2fuse l2rows; do lease_ncu_launches "$b" train-h64-fixed 'products|grad_tc|grad_pipe|grad_rows'; done
for f in "$W"/ncu-launches-*.txt; do echo "$f"; grep -E "DRAM Throughput|Duration" "$f" | head -6; done
echo "ncu done at $SECONDS s"
left=$((lim - SECONDS - (h200 == 0 ? 15 : 200)))
[ "$left" -gt 320 ] && left=320
[ "$left" -gt 60 ] && lease_ab main68py,ring3,l2fuse,l2rows "$left" train-h64-fixed
if [ "$h200" != 0 ]; then
  left=$((lim - SECONDS))
  [ "$left" -gt 80 ] && lease_torch_prefill main68py "$left" h64-fixed h96-fixed h64-mixed h96-mixed h64-uniform h96-uniform
fi
(cd "$W" && tar -czf "$OUT/final.tgz" .)
echo "done at $SECONDS s"
date -u
