#!/usr/bin/env bash
# Session 32, call 8 (the last ~150 s of the session's device time: run with timeout_s ~100): rowsrule, the row-split
# decode with 8 rows a warp only past one resident wave (rows::choose_rows), 4 elsewhere; call 7 measured both widths.
# Builds: main = 32a25f5, rowsrule. kda-bench verifies each workload before timing it; one round of the batches where
# the rule picks 4 (H32 B1, H12 B1) and 8 (H32 B8, H12 B32).
# Run as: OUT=$OUT bash .carry/lease/s32_l8.sh   carry [".carry/lease", ".carry/ab/main.tar.xz", ".carry/ab/rowsrule.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l8
lease_unpack main rowsrule
mkdir -p "$OUT/ab"
OUT=$OUT/ab timeout 75 bash scripts/gpu_ab.sh --builds main,rowsrule --impl cuda-generic --rounds 1 \
  --workload decode-h32-b1 --workload decode-h12-b1 --workload decode-h32-b8 --workload decode-h12-b32
echo "gpu_ab rc=$?"; date -u
