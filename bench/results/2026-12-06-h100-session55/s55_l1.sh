#!/usr/bin/env bash
# Session 55, call 1: main55 (873a96c, p1loop on main) and revplan55 (8d29192: revplan cherry-picked onto it).
#   1  phase 1's by-line ncu profile (full set with source) on main55 at h64-fixed: where the next step of #6 goes
#   2  revplan55's backward checks (backward-quick, the backward / stress GPU tests), then gpu_ab main55 vs
#      revplan55 at train-kimi-8k, train-h16-32k and train-h64-fixed, 2 rounds, every run verified
# ~450 s + start. Run as: OUT=$OUT bash .carry/lease/s55_l1.sh
# carry [".carry/lease", ".carry/ab/main55.tar.xz", ".carry/ab/main55.COMMIT", ".carry/ab/revplan55.tar.xz",
#        ".carry/ab/revplan55.COMMIT"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s55_l1
lease_unpack main55 revplan55
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p "$OUT/ncu"
OUT=$OUT/ncu timeout 150 bash scripts/gpu_ab.sh --builds main55 --rounds 0 --ncu prepare_kernel --ncu-count 1 \
  --workload h64-fixed > "$OUT/ncu/gpu_ab.log" 2>&1
echo "== ncu prepare rc=$?"
tail -5 "$OUT/ncu/gpu_ab.log"
date -u
lease_bwd_quick revplan55
if lease_passed bq && grep -q "^\[  PASSED  \]" "$W/tests.log" && ! grep -q "^\[  FAILED  \]" "$W/tests.log"; then
  lease_ab main55,revplan55 280 train-kimi-8k train-h16-32k train-h64-fixed
else
  echo "revplan55 failed its backward checks: no timing"
fi
date -u
