#!/usr/bin/env bash
# Session 33, call 3: tcsplit (the tame chunks' pair products two warps a block, 8 n8 tiles a warp, the later blocks'
# dg totals through shared memory: meant to give tcgrad's bits) against tcgrad (= main, f6584a1). Checks first, in
# parallel: backward-quick with fp32 and with bf16 gradients on both builds at one seed each (the same figures row for
# row expected) and tcsplit's backward / stress GPU tests; then the A/B at train-h64-fixed and the gradient kernel of
# tcsplit under ncu by line (one launch, --set full, source counters: scripts/ncu_stages.py reads them here).
# Run as: OUT=$OUT bash .carry/lease/s33_l3.sh   carry [".carry/lease", ".carry/ab/tcgrad.tar.xz", ".carry/ab/tcsplit.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l3
lease_unpack tcgrad tcsplit
lease_run tests tcsplit 2 150 ./kda_gpu_tests --gtest_filter='*Backward*:*Stress*' & pt=$!
lease_same_figures backward-quick tcgrad tcsplit
lease_same_figures "backward-quick --input-dtype-grads" tcgrad tcsplit
wait $pt
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/tests.log" | head -20
lease_checks_done
mkdir -p "$OUT/ab"
OUT=$OUT/ab timeout 220 bash scripts/gpu_ab.sh --builds tcgrad,tcsplit --impl cuda-generic --rounds 2 \
  --workload train-h64-fixed
echo "gpu_ab rc=$?"; date -u
mkdir -p "$OUT/prof"
OUT=$OUT/prof timeout 110 bash scripts/gpu_ab.sh --builds tcsplit --impl cuda-generic --rounds 0 --ncu grad_kernel \
  --ncu-count 1 --workload train-h64-fixed
echo "ncu rc=$?"; date -u
