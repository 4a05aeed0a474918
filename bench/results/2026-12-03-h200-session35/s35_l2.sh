#!/usr/bin/env bash
# Prepared in session 34 for the next session: where chunk_grad_tc.cu's 1.62 ms goes (ncu by line and phase of one
# launch at train-h64-fixed, main34), the input of its next change: 54 K warp instructions a CTA at 0.58 issued a
# scheduler a cycle, 1.12 eligible of 3.96 active warps (session 34, call 2). Then the products kernel (2.09 ms, now the
# backward's largest launch) the same way. Read the CSVs with scripts/ncu_stages.py against the build's nvdisasm.
# Run as: OUT=$OUT bash .carry/lease/s35_l2_prepared.sh
#   carry [".carry/lease", ".carry/ab/main34.tar.xz", ".carry/ab/main34.COMMIT"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l2
mkdir -p "$OUT/tc" "$OUT/prod"
OUT=$OUT/tc timeout 200 bash scripts/gpu_ab.sh --builds main34 --impl cuda-generic --rounds 0 --ncu grad_tc_kernel \
  --ncu-count 1 --workload train-h64-fixed
echo "ncu grad_tc_kernel rc=$?"; date -u
OUT=$OUT/prod timeout 200 bash scripts/gpu_ab.sh --builds main34 --impl cuda-generic --rounds 0 --ncu products \
  --ncu-count 1 --workload train-h64-fixed
echo "ncu products rc=$?"; date -u
