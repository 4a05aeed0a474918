#!/usr/bin/env bash
# Session 25's second device call (~330 s). p4mma2 (0741c75: P4b's bf16x3 chains interleaved, its scans after the
# products): backward-quick at one fresh seed on p4mma and p4mma2, the gradient kernel of main, p4mma and p4mma2 under
# Nsight Compute (full set with source, one launch each at train-h64-fixed; read here by CUDA line), then the A/B
# main, p4mma2 on train-h64-fixed (2 rounds).
# Run as: OUT=$OUT bash .carry/lease/s25_l2.sh   with carry [".carry/lease", ".carry/ab"].
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l2
lease_unpack p4mma p4mma2
lease_same_figures backward-quick p4mma p4mma2
lease_checks_done
mkdir -p "$OUT/ncu" "$OUT/ab"
OUT=$OUT/ncu timeout 150 bash scripts/gpu_ab.sh --builds main,p4mma,p4mma2 --impl cuda-generic --rounds 0 \
  --ncu "grad_kernel" --ncu-count 1 --workload train-h64-fixed
echo "ncu rc=$?"; date -u
OUT=$OUT/ab timeout 150 bash scripts/gpu_ab.sh --builds main,p4mma2 --impl cuda-generic --rounds 2 \
  --workload train-h64-fixed
echo "gpu_ab rc=$?"; date -u
