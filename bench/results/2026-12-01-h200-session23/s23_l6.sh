#!/usr/bin/env bash
# Session 23's sixth device call (~150 s): the A/B of fix2 (pairwise, 887e70e) and diagacc (= 7d769b5's kernels) on
# train-h96-fixed and train-h64-mixed, one round (call 5 measured train-h64-fixed only).
# Run as: OUT=$OUT bash .carry/lease/s23_l6.sh   with carry [".carry/lease", ".carry/ab/diagacc.tar.xz",
# ".carry/ab/fix2.tar.xz"].
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l6
OUT=$OUT timeout 280 bash scripts/gpu_ab.sh --builds fix2,diagacc --impl cuda-generic --rounds 1 \
  --workload train-h96-fixed --workload train-h64-mixed
echo "gpu_ab rc=$?"; date -u
