#!/usr/bin/env bash
# Session 42, call 3: Nsight Compute's full set with source of every kda launch of one train-h64-fixed step on main
# after this session's grad_tc changes (tcepi's archive: the tree of 60a90b0): phase 1 (forward and saving forward),
# the state passes, the reverse pass, products, grad_tc, grad_rows, to read by line here (scripts/ncu_stages.py).
# Run as: OUT=$OUT bash .carry/lease/s42_l3.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l3
OUT=$OUT timeout 400 bash scripts/gpu_ab.sh --builds tcepi --rounds 0 --ncu-count 10 \
  --ncu 'prepare_kernel|state_wgmma|reverse_wgmma|products_kernel|grad_tc|grad_rows' --workload train-h64-fixed
echo "gpu_ab rc=$?"
date -u
