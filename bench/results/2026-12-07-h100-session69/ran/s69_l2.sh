#!/usr/bin/env bash
# Session 69, call 2: pipe (branch pipe): the backward's products and tensor-core gradient pass in one launch
# (chunk_grad_pipe.cu), clusters taking tickets so that each SM runs one task's products (bound by bytes) beside
# another task's tensor-core stage (bound by issue); the same task code, so the same bits as main. Where it runs: the
# Hopper path at K = V = 128 with a group of one, and no partial-wave split of the reverse pass (train-h64-fixed,
# train-h64-mixed; train-h96-fixed keeps the two launches).
# Archives: main68py (b41cf9c: main's kernels, --python), pipe.
# 1  checks: backward-quick at one seed beside main68py (the same figures), the backward / stress GPU tests;
# 2  backward-full on pipe (the rule for a backward change);
# 3  gpu_ab main68py,pipe at train-h64-fixed and train-h64-mixed, 2 rounds;
# 4  ncu of the gradient pass's launches in one train-h64-fixed step, both builds.
# Run as OUT=$OUT bash .carry/lease/s69_l2.sh with .carry/slim.sh on, timeout_s 600, carry [".carry/lease",
# ".carry/ab"] (LIMIT below the budget left); returns s69_l2.log, final.tgz, ab/results.tar.
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s69_l2
lease_unpack main68py pipe
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lim=${LIMIT:-560}
lease_run btests-pipe pipe 4 150 ./kda_gpu_tests --gtest_filter='*Backward*:*Stress*' & pt=$!
lease_same_figures backward-quick main68py pipe
wait $pt
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/btests-pipe.log" | head -5
echo "checks done at $SECONDS s"
lease_checks_done final
if lease_passed same-backward-quick-pipe; then
  lease_bwd_full pipe
  for n in bwdfull-a bwdfull-b bwdfull-c bwdfull-d; do lease_passed $n && echo "pipe: $n passed" || echo "pipe: $n FAILED"; done
  grep -hE "FAIL" "$W"/bwdfull-*.log | cut -c1-160 | head
  echo "backward-full done at $SECONDS s"
  lease_checks_done final
fi
left=$((lim - SECONDS - 90))
[ "$left" -gt 240 ] && left=240
[ "$left" -gt 60 ] && lease_ab main68py,pipe "$left" train-h64-fixed train-h64-mixed
echo "ab done at $SECONDS s"
if [ $((lim - SECONDS)) -gt 80 ]; then
  lease_ncu_launches main68py train-h64-fixed 'products|grad_tc|grad_pipe|grad_rows'
  lease_ncu_launches pipe train-h64-fixed 'products|grad_tc|grad_pipe|grad_rows'
fi
(cd "$W" && tar -czf "$OUT/final.tgz" .)
echo "done at $SECONDS s"
date -u
