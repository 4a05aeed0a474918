#!/usr/bin/env bash
# Session 54, call 2: session 53's calls 2 and 3 in one (device starts were scarce: each failed start cost ~90 s).
#   1  revplan (branch revplan, 8405d89: the backward's reverse pass planned with the forward's pricing) against
#      main53: its backward checks (backward-quick, the backward / stress GPU tests), then gpu_ab at train-kimi-8k,
#      train-h16-32k and train-h64-fixed, 2 rounds, every run verified
#   2  phase 1's by-line ncu profile (full set with source) on BUILD, call 1's better phase-1 build: the next step's
#      evidence
# ~500 s + start. Run as: OUT=$OUT bash .carry/lease/s54_l2.sh BUILD
# carry [".carry/lease", ".carry/ab/main53.tar.xz", ".carry/ab/revplan.tar.xz", ".carry/ab/BUILD.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
b=$1
lease_begin s54_l2
lease_unpack main53 revplan "$b"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lease_bwd_quick revplan
if lease_passed bq && grep -q "^\[  PASSED  \]" "$W/tests.log" && ! grep -q "^\[  FAILED  \]" "$W/tests.log"; then
  lease_ab main53,revplan 300 train-kimi-8k train-h16-32k train-h64-fixed
else
  echo "revplan failed its backward checks: no timing"
fi
mkdir -p "$OUT/ncu"
OUT=$OUT/ncu timeout 140 bash scripts/gpu_ab.sh --builds "$b" --rounds 0 --ncu prepare_kernel --ncu-count 1 \
  --workload h64-fixed > "$OUT/ncu/gpu_ab.log" 2>&1
echo "== ncu prepare rc=$?"
tail -5 "$OUT/ncu/gpu_ab.log"
date -u
