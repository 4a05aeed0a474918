#!/usr/bin/env bash
# Session 39, call 1 (~250 s): main (34f05f6) measured before any change: backward-quick at a fresh seed (its new
# bwd_k128_v128 case, K = V = 128, the products kernel's wgmma instance, has not run on an H200 yet), then every
# launch of one train-h64-fixed kda-bench step under ncu (kernel by kernel: which of the step's 8 ms to take next),
# then the products and grad_tc kernels by source line (gpu_ab.sh --ncu: full set, SASS CSV for ncu_stages.py).
# Run as: OUT=$OUT bash .carry/lease/s39_l1.sh
#   carry [".carry/lease", ".carry/ab/main.tar.xz", ".carry/ab/main.COMMIT"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l1
lease_unpack main
lease_run bq main 8 150 ./kda-verify --impl cuda-generic --suite backward-quick
grep -hE "^bwd_|kda-verify:|seed" "$W/bq.log" | cut -c1-200
lease_checks_done
lease_ncu_launches main train-h64-fixed '.'
cp "$W/ncu-launches-main-train-h64-fixed.txt" "$OUT/"
mkdir -p "$OUT/ab"
OUT=$OUT/ab timeout 150 bash scripts/gpu_ab.sh --builds main --rounds 0 --ncu 'products_kernel|grad_tc_kernel' \
  --ncu-count 2 --workload train-h64-fixed
echo "gpu_ab ncu rc=$?"
date -u
