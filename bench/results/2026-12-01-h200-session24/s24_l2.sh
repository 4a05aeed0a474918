#!/usr/bin/env bash
# Session 24's second device call (~90 s): why p4 (the gradient pass's P4 on two threads a channel) made the backward
# 2.07 ms slower (call 1): the gradient kernel of main and p4 under Nsight Compute (full set with source, one launch
# each at train-h64-fixed), read here by CUDA line (scripts/ncu_stages.py --sass).
# Run as: OUT=$OUT bash .carry/lease/s24_l2.sh   with carry [".carry/lease", ".carry/ab"].
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l2
OUT=$OUT timeout 250 bash scripts/gpu_ab.sh --builds main,p4 --impl cuda-generic --rounds 0 \
  --ncu "grad_kernel" --ncu-count 1 --workload train-h64-fixed
echo "ncu rc=$?"; date -u
