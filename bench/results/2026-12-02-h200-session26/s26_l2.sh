#!/usr/bin/env bash
# Session 26, call 2 (~420 s): issue #7's decode, the bulk kernel's state writes. Builds (.carry/ab): main = a8b8b63
# (6922370's kernels; kda-bench now also times a device copy of the same bytes, DeviceCopy), dtma = the consumers'
# rows back through the stage and out by bulk stores (TMA), the stage released after the stores read it, dst = plain
# st.global instead of st.global.cs. All three store the same values, so decode-full must print the same figures.
# Checks: decode-full on the three at one fresh seed (lease_same_figures), dtma's decode GPU tests; then the A/B on
# the bulk kernel's batches (and h12-b32, the row-split kernel's, unchanged, for the copy baseline), 2 rounds; then
# main's and dtma's decode kernel at decode-h32-b256 and b32 under ncu (summary sections).
# Run as: OUT=$OUT bash .carry/lease/s26_l2.sh   with carry [".carry/lease", ".carry/ab"].
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l2
lease_unpack main dtma dst
pids=()
lease_run tests-paths dtma 2 280 ./kda_gpu_tests --gtest_filter='Cases/CudaDecodePaths.*' & pids+=($!)
lease_run tests-dec dtma 2 280 ./kda_gpu_tests --gtest_filter='Cases/CudaDecode.*:*CudaFusedDecode*' & pids+=($!)
lease_same_figures decode-full main dtma dst
wait "${pids[@]}"
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W"/tests-*.log | head -20
lease_checks_done
mkdir -p "$OUT/ab"
OUT=$OUT/ab timeout 200 bash scripts/gpu_ab.sh --builds main,dtma,dst --impl cuda-generic --rounds 2 \
  --workload decode-h32-b32 --workload decode-h32-b128 --workload decode-h32-b256 --workload decode-h12-b128 \
  --workload decode-h32-b32-bf16 --workload decode-h32-b256-bf16 --workload decode-h12-b32
echo "gpu_ab rc=$?"; date -u
for b in main dtma; do
  for wl in decode-h32-b256 decode-h32-b32; do lease_ncu $b $wl decode_bulk; done
done
cp "$W"/ncu-*.txt "$OUT/" 2>/dev/null
date -u
