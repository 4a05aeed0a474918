#!/usr/bin/env bash
# Session 40, call 3 (~500 s): main40 (2d18a87, the products kernel's P1 slices by TMA) with its PyTorch extension:
# issue #9's training step through the torch op beside FLA in one process (bench_torch.py --part train,
# train-h64-fixed: FLA, kda with recompute, kda-saved), the first such figure since session 36; then Nsight Compute's
# full set with source of the first three products / grad_tc launches of a kda-bench step (gpu_ab.sh --ncu), to read
# here by line for the next step.
# Run as: OUT=$OUT bash .carry/lease/s40_l3.sh
#   carry [".carry/lease", ".carry/ab/main40.tar.xz", ".carry/ab/main40.COMMIT", ".whl"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l3
lease_unpack main40
lease_torch_train main40 h64-fixed 400
mkdir -p "$OUT/ab"
OUT=$OUT/ab timeout 150 bash scripts/gpu_ab.sh --builds main40 --impl cuda-generic --rounds 0 \
  --ncu 'products|grad_tc' --ncu-count 3 --workload train-h64-fixed; echo "gpu_ab rc=$?"
date -u
