#!/usr/bin/env bash
# Session 24's first device call (~420 s). p4 (main + the gradient pass's P4 on two threads per channel, each owning
# half of the chunk's rows; + the decode plan's smaller units where they take a quarter of the busiest CTA's tiles):
# backward-quick, the backward GPU tests, decode-full, backward-full whole (four processes); then the A/B against main
# (fb5ed9e's kernels) on train-h64-fixed (2 rounds) and the decode sizes the plan change touches or borders.
# Run as: OUT=$OUT bash .carry/lease/s24_l1.sh   with carry [".carry/lease", ".carry/ab"].
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l1
lease_unpack main p4
pids=()
lease_run verify-bwdq p4 2 200 ./kda-verify --impl cuda-generic --suite backward-quick & pids+=($!)
lease_run tests p4 2 220 ./kda_gpu_tests --gtest_filter='*Backward*:*Stress*' & pids+=($!)
lease_run verify-decode p4 1 200 ./kda-verify --impl cuda-generic --suite decode-full & pids+=($!)
lease_bwd_full p4 & pids+=($!)
wait "${pids[@]}"  # never a bare wait (the tee above)
for n in verify-bwdq verify-decode bwdfull-a bwdfull-b bwdfull-c bwdfull-d; do lease_passed $n && echo "$n passed" || echo "$n FAILED"; done
grep -hE "^bwd_" "$W"/bwdfull-*.log | cut -c1-160
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W"/tests.log | head -20
lease_checks_done
mkdir -p "$OUT/ab"
OUT=$OUT/ab timeout 200 bash scripts/gpu_ab.sh --builds main,p4 --impl cuda-generic --rounds 2 \
  --workload train-h64-fixed --workload decode-h12-b32 --workload decode-h32-b32 --workload decode-h12-b8 \
  --workload decode-h12-b128
echo "gpu_ab rc=$?"; date -u
