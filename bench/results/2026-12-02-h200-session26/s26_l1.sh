#!/usr/bin/env bash
# Prepared in session 25 for the next session's first device call (~480 s), not yet run. Builds from this folder's
# patches (git am onto 5eda10a, whose kernels are 6922370's): p4c3 (p4mma, p4mma2, p4c, p4c2, p4c3 in that order: P4b
# concurrent with P4, its table and result loads an iteration ahead, P7 reading no scratch, P6's shared loads ahead of
# its stores), latb2 (latb, latb2: P5b's beta logits and P7's dk from shared memory, P6's loads ahead of its stores)
# and latp (pblk in registers). Checks: backward-quick on p4c3 at a fresh seed, backward-quick figures of latb2 and
# latp against main's; then the A/B main, p4c3, latb2, latp on train-h64-fixed (2 rounds), the gradient kernel of
# p4c3 under ncu, backward-full and the GPU tests on p4c3.
# Run as: OUT=$OUT bash .carry/lease/s26_l1.sh   with carry [".carry/lease", ".carry/ab"].
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l1
lease_unpack main p4c3 latb2 latp
S=(--seed "$(od -An -N8 -tu8 /dev/urandom | tr -d " ")")
echo "backward-quick seed: ${S[1]}"
lease_run bwdq-p4c3 p4c3 4 120 ./kda-verify --impl cuda-generic --suite backward-quick "${S[@]}"
lease_passed bwdq-p4c3 && echo "bwdq-p4c3 passed" || echo "bwdq-p4c3 FAILED"
lease_same_figures backward-quick main latb2 latp
mkdir -p "$OUT/ab" "$OUT/ncu"
OUT=$OUT/ab timeout 300 bash scripts/gpu_ab.sh --builds main,p4c3,latb2,latp --impl cuda-generic --rounds 2 \
  --workload train-h64-fixed
echo "gpu_ab rc=$?"; date -u
OUT=$OUT/ncu timeout 60 bash scripts/gpu_ab.sh --builds p4c3 --impl cuda-generic --rounds 0 \
  --ncu "grad_kernel" --ncu-count 1 --workload train-h64-fixed
echo "ncu rc=$?"; date -u
grep -hE "^bwd_" "$W"/bwdq-p4c3.log | cut -c1-160
lease_bwd_checks p4c3
lease_checks_done
