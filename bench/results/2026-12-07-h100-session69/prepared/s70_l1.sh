#!/usr/bin/env bash
# Prepared in session 69 as the next first call (its last call was refused: too little budget to start a machine).
# ring3 (branch ring3, on main): the backward products kernel's wgmma P1 with a slice ring three slots deep instead of
# two (two slices in flight while one is multiplied; its two slot waits held 18% of the kernel's stall samples, ncu,
# session 69 call 4); dO' / dW's planes at the front of shared memory so the 72 KB ring overlays the staging and the
# operand rings, CS's partials in a region of their own: 114,712 bytes a CTA, two an SM. The same products in the same
# order, so the same bits. Session 69's occ1 (one CTA an SM: +12% only) says the kernel is mostly bound by bytes, so
# expect a few percent at most.
# Archives: main68py (b41cf9c: main's kernels, --python), ring3 (its commit in ring3.COMMIT).
# 1  checks: backward-quick at one seed beside main68py (the same figures), the backward / stress / wgmma GPU tests
#    (WgmmaLayout.ProductsP1MatchesFp64 runs the new ring alone); then backward-full on ring3;
# 2  ncu of the products launches in one train-h64-fixed step, both builds;
# 3  gpu_ab main68py,ring3 at train-h64-fixed, 2 rounds;
# 4  on an H200 only: the six prefill workloads beside FLA through main68py's op (the last H200 figures are session
#    50's).
# Run as OUT=$OUT bash .carry/lease/s70_l1.sh with .carry/slim.sh on and timeout_s 600, carry [".carry/lease",
# ".carry/ab", ".whl", ".carry/triton"] (LIMIT below the budget left); returns s70_l1.log, final.tgz, ab/results.tar
# and on an H200 prefill.tgz and the Triton cache's parts.
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s70_l1
lease_unpack main68py ring3
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lim=${LIMIT:-560}
h200=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -c H200)
lease_run btests-r3 ring3 4 150 ./kda_gpu_tests --gtest_filter='*Backward*:*Stress*:*Wgmma*' & pt=$!
lease_same_figures backward-quick main68py ring3
wait $pt
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/btests-r3.log" | head -5
echo "checks done at $SECONDS s"
lease_checks_done final
if lease_passed same-backward-quick-ring3; then
  lease_bwd_full ring3
  for n in bwdfull-a bwdfull-b bwdfull-c bwdfull-d; do lease_passed $n && echo "ring3: $n passed" || echo "ring3: $n FAILED"; done
  grep -hE "FAIL" "$W"/bwdfull-*.log | cut -c1-160 | head
  echo "backward-full done at $SECONDS s"
  lease_checks_done final
fi
for b in main68py ring3; do lease_ncu_launches "$b" train-h64-fixed 'products'; done
echo "ncu done at $SECONDS s"
left=$((lim - SECONDS - (h200 == 0 ? 15 : 200)))
[ "$left" -gt 240 ] && left=240
[ "$left" -gt 60 ] && lease_ab main68py,ring3 "$left" train-h64-fixed
if [ "$h200" != 0 ]; then
  left=$((lim - SECONDS))
  [ "$left" -gt 80 ] && lease_torch_prefill main68py "$left" h64-fixed h96-fixed h64-mixed h96-mixed h64-uniform h96-uniform
fi
(cd "$W" && tar -czf "$OUT/final.tgz" .)
echo "done at $SECONDS s"
date -u
