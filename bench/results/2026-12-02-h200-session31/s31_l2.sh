#!/usr/bin/env bash
# Session 31, second device call (~420 s: run with timeout_s 590).
# Builds (.carry/ab): main = 23954d8 (as in call 1); p4mma = d4ceb0d (main + P4's block pairs on mma.sync m16n8k8
# in 3xTF32, a warp per 32 channels, products through scratch to the per-channel epilogue; not the same bits).
# Checks: p4mma's backward / stress GPU tests and backward-full whole (fp32 gradients: the generic instance), then
# backward-quick with bf16 gradients (the bf16 / bounded instance the timing runs). Then the A/B at train-h64-fixed
# (2 rounds) and the gradient kernel's launches under ncu.
# Run as: OUT=$OUT bash .carry/lease/s31_l2.sh   carry [".carry/lease", ".carry/ab/main.tar.xz",
# ".carry/ab/p4mma.tar.xz"].
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l2
lease_unpack main p4mma
lease_bwd_checks p4mma
lease_same_figures "backward-quick --input-dtype-grads" p4mma
lease_checks_done
mkdir -p "$OUT/ab"
OUT=$OUT/ab timeout 200 bash scripts/gpu_ab.sh --builds main,p4mma --impl cuda-generic --rounds 2 \
  --workload train-h64-fixed
echo "gpu_ab rc=$?"; date -u
for b in main p4mma; do lease_ncu_launches $b train-h64-fixed 'grad_kernel'; done
cp "$W"/ncu-*.txt "$OUT/" 2>/dev/null
date -u
