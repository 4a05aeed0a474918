#!/usr/bin/env bash
# Session 25's first device call (~450 s). p4mma (3cda965: the gradient pass's block pairs on tensor cores, P4b)
# against main (6922370's kernels): backward-quick at one fresh seed on both, backward-full whole and the backward /
# stress GPU tests on p4mma, then the A/B main, p4mma on train-h64-fixed (2 rounds).
# Run as: OUT=$OUT bash .carry/lease/s25_l1.sh   with carry [".carry/lease", ".carry/ab"].
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l1
lease_unpack main p4mma
S=(--seed "$(od -An -N8 -tu8 /dev/urandom | tr -d " ")")  # fresh, one for both builds
echo "backward-quick seed: ${S[1]}"
pids=()
for b in main p4mma; do
  lease_run bwdq-$b $b 1 200 ./kda-verify --impl cuda-generic --suite backward-quick "${S[@]}" & pids+=($!)
done
lease_run tests p4mma 2 220 ./kda_gpu_tests --gtest_filter='*Backward*:*Stress*' & pids+=($!)
lease_bwd_full p4mma & pids+=($!)
wait "${pids[@]}"  # never a bare wait (the tee above)
for n in bwdq-main bwdq-p4mma bwdfull-a bwdfull-b bwdfull-c bwdfull-d; do
  lease_passed $n && echo "$n passed" || echo "$n FAILED"
done
grep -hE "^bwd_" "$W"/bwdq-main.log "$W"/bwdq-p4mma.log | cut -c1-160
grep -hE "^bwd_" "$W"/bwdfull-*.log | cut -c1-160
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W"/tests.log | head -20
lease_checks_done
mkdir -p "$OUT/ab"
OUT=$OUT/ab timeout 200 bash scripts/gpu_ab.sh --builds main,p4mma --impl cuda-generic --rounds 2 \
  --workload train-h64-fixed
echo "gpu_ab rc=$?"; date -u
