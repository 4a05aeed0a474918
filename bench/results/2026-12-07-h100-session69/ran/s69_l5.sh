#!/usr/bin/env bash
# Session 69, call 5: how the gradient pass's two largest kernels follow occupancy, for the fusion's design (session
# 54's Design A runs the products and the tensor-core stage in one CTA an SM). occ1 (experiment branch) launches
# products_kernel and grad_tc_kernel with 120 KB of shared memory each, so one CTA an SM where main has two; the same
# code otherwise. ncu of the gradient pass's launches in one train-h64-fixed step, main68py and occ1 in the same call.
# Run as OUT=$OUT bash .carry/lease/s69_l5.sh with .carry/slim.sh on, carry [".carry/lease", ".carry/ab"]; returns
# s69_l5.log and final.tgz.
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s69_l5
lease_unpack main68py occ1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for b in main68py occ1; do lease_ncu_launches "$b" train-h64-fixed 'products|grad_tc|grad_rows'; done
(cd "$W" && tar -czf "$OUT/final.tgz" .)
echo "done at $SECONDS s"
date -u
