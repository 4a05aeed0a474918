#!/usr/bin/env bash
# Session 33, call 1: rowsrule (session 32's patch 0003: the row-split decode with 8 state rows a warp only where the
# 4-row grid's warps exceed one resident wave, 4 elsewhere), measured against main (32a25f5's kernels), then its checks:
# decode-full with the same figures as main at one seed, and the decode GPU tests (>120 s).
# Run as: OUT=$OUT bash .carry/lease/s33_l1.sh   carry [".carry/lease", ".carry/ab/main.tar.xz", ".carry/ab/rowsrule.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l1
lease_unpack main rowsrule
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
mkdir -p "$OUT/ab"
OUT=$OUT/ab timeout 200 bash scripts/gpu_ab.sh --builds main,rowsrule --impl cuda-generic --rounds 2 \
  --workload decode-h32-b1 --workload decode-h12-b1 --workload decode-h32-b8 --workload decode-h12-b8 \
  --workload decode-h12-b32 --workload decode-h32-b32
echo "gpu_ab rc=$?"; date -u
lease_same_figures decode-full main rowsrule
lease_run dectests rowsrule 2 290 ./kda_gpu_tests --gtest_filter='*Decode*'
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/dectests.log" | head -20
lease_checks_done
