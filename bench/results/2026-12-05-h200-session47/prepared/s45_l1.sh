#!/usr/bin/env bash
# Prepared in session 45 (no device lent that session) for the next session's first device call (~480 s + start):
# timing of two prepared backward changes against main's code, each alone, on an idle GPU.
#   both  = db087b6 (main's kernels; main 88c98c2 differs only in tests and records)
#   rv3   = b6ba863 (branch rv2, session 44: the reverse passes' tile prefetch ranges formed once a CTA, dO'
#           converted under one dtype switch, U and the decays read with ld.shared)
#   qkfin = 6384dcf (branch qkfin, session 45: dq / dk finished in grad_tc through the L2 norm's backward, the K = 128
#           halves a 2-CTA cluster exchanging their rows' dots through distributed shared memory; grad_rows without q /
#           k and the DQ / DK tiles)
# First a bounded smoke run of qkfin's new bf16-gradient GPU cases (a wrong cluster barrier hangs its launch), then
# gpu_ab.sh both,rv3,qkfin at train-h64-fixed (two rounds; every run verifies the gradients against the fp64
# reference), then ncu of qkfin's and both's grad_tc / grad_rows launches and of rv3's state / reverse launches.
# s45_l2.sh checks the backward of each (backward / stress GPU tests, backward-full, qkfin's with bf16 gradients).
# Archives: .carry/ab/{both,rv3,qkfin}.tar.xz on the session-45 machine (if gone: scripts/gpu_build.sh --python on each
# commit, one at a time, copied to .carry/ab/NAME.tar.xz with NAME.COMMIT; `xz -t` each). Carried: 60.9 MiB with the
# tree.
# Run as: OUT=$OUT bash .carry/lease/s45_l1.sh
# carry [".carry/lease", ".carry/ab/both.tar.xz", ".carry/ab/rv3.tar.xz", ".carry/ab/qkfin.tar.xz"] (the archives by
# name: .carry/ab holds four, more than a call carries)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l1
lease_unpack both rv3 qkfin
lease_run smoke qkfin 2 120 ./kda_gpu_tests --gtest_filter='*Backward*bf16_grads*'
grep -hE "^\[  (FAILED|PASSED) |tests? ran|bf16_grads" "$W/smoke.log" | head -30
lease_checks_done smoke
# A hung or failing qkfin (its cluster barriers) leaves the timing to the other two builds.
if grep -q "^\[  PASSED  \]" "$W/smoke.log" && ! grep -q "^\[  FAILED  \]" "$W/smoke.log"; then
  lease_ab both,rv3,qkfin 320 train-h64-fixed
  OUT=$OUT/ncu1 timeout 90 bash scripts/gpu_ab.sh --builds both,qkfin --rounds 0 --ncu-count 2 \
    --ncu 'grad_tc|grad_rows' --workload train-h64-fixed
  echo "ncu grad rc=$?"
else
  echo "qkfin's smoke run failed: timing both,rv3 only"
  lease_ab both,rv3 220 train-h64-fixed
fi
OUT=$OUT/ncu2 timeout 70 bash scripts/gpu_ab.sh --builds rv3 --rounds 0 --ncu-count 3 \
  --ncu 'state_wgmma|reverse_wgmma' --workload train-h64-fixed
echo "ncu state/reverse rc=$?"
date -u
