#!/usr/bin/env bash
# Queued in session 56: three phase-1 steps against main's phase 1 (s2half: 225a891, main's kernels; the commits
# after it changed comments, records and scripts only):
#   betabits (06b5e6d on b2d9fc5) beta's bits converted at S0, not right after their load at S5c (bits kept)
#   s3bf16 (5e9eb86 on 510e4aa) S3 of a plain forward in bf16x3 (figures change in their last digits)
#   s3bal (e0fbd0a on s3bf16) S3's diagonal blocks' last quarter of k-steps on warps 6-9 (figures change too)
#   1  kda-verify --suite full and backward-quick on the four at one seed each (betabits: the same figures as
#      s2half?; s3bf16, s3bal: judged against the fp64 oracle and row by row against s2half's), beside s3bal's GPU
#      tests (all but decode: s3bal changes the backward's recompute too)
#   2  gpu_ab s2half / betabits / s3bf16 / s3bal at h64-fixed and h96-fixed, 2 rounds, every run verified
#   3  phase 1's by-line ncu profile on s3bal at h64-fixed in what is left of 560 s
# Run as: OUT=$OUT bash .carry/lease/s57_l1.sh, after `.carry/slim.sh on` (four archives and the tracked tree are
# over 64 MiB; `.carry/slim.sh off` right after the call, nothing committed between)
# carry [".carry/lease", ".carry/ab"] with .carry/ab holding those four alone (move the others aside)
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s57_l1
lease_unpack s2half betabits s3bf16 s3bal
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lease_run gtests s3bal 4 200 ./kda_gpu_tests --gtest_filter='-*Decode*' & pg=$!
lease_same_figures full s2half betabits s3bf16 s3bal
wait $pg
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/gtests.log" | head
lease_same_figures backward-quick s2half betabits s3bf16 s3bal
grep -hE " FAIL |stress_near_identical|stress_beta_at_2|kda-verify:" "$W"/same-full-*.log | cut -c1-150
lease_checks_done checks
lease_ab s2half,betabits,s3bf16,s3bal 230 h64-fixed h96-fixed
left=$((560 - SECONDS))
echo "left for ncu: $left s"
if [ $left -gt 60 ]; then
  mkdir -p "$OUT/ncu"
  OUT=$OUT/ncu timeout $left bash scripts/gpu_ab.sh --builds s3bal --rounds 0 --ncu prepare_kernel --ncu-count 1 \
    --workload h64-fixed > "$OUT/ncu/gpu_ab.log" 2>&1
  echo "== ncu prepare rc=$?"
  tail -5 "$OUT/ncu/gpu_ab.log"
fi
date -u
