#!/usr/bin/env bash
# Session 23's fifth device call (~330 s), if diagacc passed call 4's probe: backward-full whole on diagacc (four
# processes), backward-quick, then the A/B against fix2 on train-h64-fixed (2 rounds).
# Run as: OUT=$OUT bash .carry/lease/s23_l5.sh   with carry [".carry/lease", ".carry/ab"].
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l5
lease_unpack diagacc
pids=()
lease_run verify-bwdq diagacc 2 200 ./kda-verify --impl cuda-generic --suite backward-quick & pids+=($!)
lease_bwd_full diagacc & pids+=($!)
wait "${pids[@]}"  # never a bare wait (the tee above)
for n in verify-bwdq bwdfull-a bwdfull-b bwdfull-c bwdfull-d; do lease_passed $n && echo "$n passed" || echo "$n FAILED"; done
grep -hE "^bwd_" "$W"/bwdfull-*.log | cut -c1-160
lease_checks_done
mkdir -p "$OUT/train"
OUT=$OUT/train timeout 150 bash scripts/gpu_ab.sh --builds fix2,diagacc --impl cuda-generic --rounds 2 \
  --workload train-h64-fixed
echo "gpu_ab train rc=$?"; date -u
