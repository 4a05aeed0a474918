#!/usr/bin/env bash
# Session 36, call 3: the per-row finishing's (chunk_grad_rows.cu) next rows asked of L2 ahead (issue #9). Call 2's
# tcfin showed that pass latency-bound (a warp a row, one round trip a row). rowspf: each warp asks L2 for its next
# row's lines (q, k, g, v, the product rows, A', dA; a lane a line) before the row's own loads; rowspf2: the next two
# rows. Hints only: backward-quick at one seed must give main35's figures row for row. Then the backward / stress GPU
# tests of rowspf, the A/B at train-h64-fixed, grad_rows under ncu (main35, rowspf, rowspf2), backward-full of rowspf.
# Run as: OUT=$OUT bash .carry/lease/s36_l3.sh
#   carry [".carry/lease", ".carry/ab/main35.tar.xz", ".carry/ab/rowspf.tar.xz", ".carry/ab/rowspf2.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l3
lease_unpack main35 rowspf rowspf2
lease_run tests rowspf 2 200 ./kda_gpu_tests --gtest_filter='*Backward*:*Stress*' & pt=$!
lease_same_figures backward-quick main35 rowspf rowspf2
wait $pt
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/tests.log" | head -20
date -u
mkdir -p "$OUT/ab"
OUT=$OUT/ab timeout 330 bash scripts/gpu_ab.sh --builds main35,rowspf,rowspf2 --impl cuda-generic --rounds 2 \
  --workload train-h64-fixed
echo "gpu_ab rc=$?"; date -u
for b in main35 rowspf rowspf2; do lease_ncu "$b" train-h64-fixed 'grad_rows_kernel'; done
cp "$W"/ncu-*.txt "$OUT/" 2>/dev/null
lease_bwd_full rowspf & pf=$!
wait $pf
for n in bwdfull-a bwdfull-b bwdfull-c bwdfull-d; do lease_passed $n && echo "rowspf: $n passed" || echo "rowspf: $n FAILED"; done
grep -hE "^bwd_" "$W"/bwdfull-*.log | cut -c1-160
lease_checks_done
