#!/usr/bin/env bash
# Session 25's third device call (~420 s). p4c (5320164: P4b concurrent with P4 on the P5a warps, its loops rolled,
# its terms through scratch): backward-quick at a fresh seed, the A/B main, p4c on train-h64-fixed (2 rounds), the
# gradient kernel of p4c under Nsight Compute (read here by CUDA line), then backward-full whole and the backward /
# stress GPU tests on p4c.
# Run as: OUT=$OUT bash .carry/lease/s25_l3.sh   with carry [".carry/lease", ".carry/ab"].
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l3
lease_unpack p4c
S=(--seed "$(od -An -N8 -tu8 /dev/urandom | tr -d " ")")
echo "backward-quick seed: ${S[1]}"
lease_run bwdq-p4c p4c 4 120 ./kda-verify --impl cuda-generic --suite backward-quick "${S[@]}"
lease_passed bwdq-p4c && echo "bwdq-p4c passed" || echo "bwdq-p4c FAILED"
mkdir -p "$OUT/ab" "$OUT/ncu"
OUT=$OUT/ab timeout 150 bash scripts/gpu_ab.sh --builds main,p4c --impl cuda-generic --rounds 2 \
  --workload train-h64-fixed
echo "gpu_ab rc=$?"; date -u
OUT=$OUT/ncu timeout 60 bash scripts/gpu_ab.sh --builds p4c --impl cuda-generic --rounds 0 \
  --ncu "grad_kernel" --ncu-count 1 --workload train-h64-fixed
echo "ncu rc=$?"; date -u
pids=()
lease_run tests p4c 2 220 ./kda_gpu_tests --gtest_filter='*Backward*:*Stress*' & pids+=($!)
lease_bwd_full p4c & pids+=($!)
wait "${pids[@]}"  # never a bare wait (the tee above)
for n in bwdfull-a bwdfull-b bwdfull-c bwdfull-d; do lease_passed $n && echo "$n passed" || echo "$n FAILED"; done
grep -hE "^bwd_" "$W"/bwdq-p4c.log "$W"/bwdfull-*.log | cut -c1-160
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W"/tests.log | head -20
lease_checks_done
