#!/usr/bin/env bash
# Session 37, call 4 (~120 s): the next session's inputs, on rue (= main c17467f's code): grad_tc_kernel and
# products_kernel by line under ncu at train-h64-fixed (the two largest backward kernels, 1.53 and 1.64 ms), read
# with scripts/ncu_stages.py against rue's nvdisasm.
# Run as: OUT=$OUT bash .carry/lease/s37_l4.sh
#   carry [".carry/lease", ".carry/ab/rue.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l4
lease_unpack rue
for k in grad_tc_kernel products_kernel; do
  mkdir -p "$OUT/$k"
  OUT=$OUT/$k timeout 150 bash scripts/gpu_ab.sh --builds rue --impl cuda-generic --rounds 0 \
    --ncu $k --ncu-count 1 --workload train-h64-fixed
  echo "ncu $k rc=$?"; date -u
done
