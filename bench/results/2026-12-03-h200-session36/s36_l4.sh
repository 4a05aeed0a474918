#!/usr/bin/env bash
# Session 36, call 4: where grad_rows_kernel's 0.72 ms goes (ncu by line of one launch at train-h64-fixed, main35),
# the input of its next change: calls 2 and 3 showed it neither helped by L2 hits inside grad_tc nor by prefetching
# its next rows (513 M warp instructions, 1.64 eligible warps a scheduler, DRAM 67%). Read the CSV with
# scripts/ncu_stages.py against main35's nvdisasm.
# Run as: OUT=$OUT bash .carry/lease/s36_l4.sh
#   carry [".carry/lease", ".carry/ab/main35.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l4
mkdir -p "$OUT/rows"
OUT=$OUT/rows timeout 200 bash scripts/gpu_ab.sh --builds main35 --impl cuda-generic --rounds 0 \
  --ncu grad_rows_kernel --ncu-count 1 --workload train-h64-fixed
echo "ncu grad_rows_kernel rc=$?"; date -u
