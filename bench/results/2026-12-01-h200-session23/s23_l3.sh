#!/usr/bin/env bash
# Session 23's third device call (~450 s): the fix (a backward's recompute keeps the diagonal blocks pairwise, on
# 8a024be) against t23 (8a024be: main's kernels plus the new GPU test near_identical_keys_beta_at_2_k128). Checks on
# fix: backward-full (every case, four processes), backward-quick (fresh seed), the near-identical probe at session
# 22's two failing seeds, the backward GPU tests; on t23 the new GPU test alone (it should fail: main's kernels). Then
# the A/B timing, train-h64-fixed (2 rounds) and train-h96-fixed (1 round).
# Run as: OUT=$OUT bash .carry/lease/s23_l3.sh   with carry [".carry/lease", ".carry/ab"].
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l3
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
lease_unpack t23 fix
F='*Backward*'
V=(./kda-verify --impl cuda-generic)
NI=(--suite backward-full --filter near_identical_keys_beta_at_2)
pids=()
lease_run verify-bwdq fix 2 200 "${V[@]}" --suite backward-quick & pids+=($!)
lease_run ni-s1 fix 1 200 "${V[@]}" "${NI[@]}" --seed 14329222173504304775 & pids+=($!)
lease_run ni-s2 fix 1 200 "${V[@]}" "${NI[@]}" --seed 2902554903083653309 & pids+=($!)
lease_run tests fix 2 220 ./kda_gpu_tests --gtest_filter="$F" & pids+=($!)
lease_run tests-t23 t23 1 220 ./kda_gpu_tests --gtest_filter='*near_identical_keys_beta_at_2_k128*' & pids+=($!)
lease_bwd_full fix & pids+=($!)
wait "${pids[@]}"  # never a bare wait (the tee above)
grep -hE "near_identical" "$W"/ni-*.log | cut -c1-200
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W"/tests*.log | head -20
for n in verify-bwdq bwdfull-a bwdfull-b bwdfull-c bwdfull-d ni-s1 ni-s2; do
  lease_passed $n && echo "$n passed" || echo "$n FAILED"
done
lease_checks_done
mkdir -p "$OUT/train"
OUT=$OUT/train timeout 150 bash scripts/gpu_ab.sh --builds t23,fix --impl cuda-generic --rounds 2 \
  --workload train-h64-fixed
echo "gpu_ab train rc=$?"; date -u
mkdir -p "$OUT/train96"
OUT=$OUT/train96 timeout 110 bash scripts/gpu_ab.sh --builds t23,fix --impl cuda-generic --rounds 1 \
  --workload train-h96-fixed
echo "gpu_ab train96 rc=$?"; date -u
