#!/usr/bin/env bash
# Session 69, call 4: the byte ledger of the gradient pass's two largest launches, for the fusion of the products into
# grad_tc (docs/backward.md, session 54's budget): Nsight Compute's full set on one products_kernel and one
# grad_tc_kernel launch of a train-h64-fixed step (main68py = main's kernels): DRAM bytes read and written, L2 hit
# rates, stall reasons. Run as OUT=$OUT bash .carry/lease/s69_l4.sh with .carry/slim.sh on, carry [".carry/lease",
# ".carry/ab"]; returns s69_l4.log and ab/results.tar.
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s69_l4
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p "$OUT/ab"
OUT=$OUT/ab timeout 300 bash scripts/gpu_ab.sh --builds main68py --ncu 'products_kernel|grad_tc_kernel' --ncu-count 2 \
  --rounds 0 --workload train-h64-fixed
echo "gpu_ab rc=$?"
echo "done at $SECONDS s"
date -u
