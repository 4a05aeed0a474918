#!/usr/bin/env bash
# Session 36, call 2: the tame chunks' row finishing inside grad_tc (issue #9). tcfin: the grad_tc CTA that finishes
# a task last (a count in the product tile's Arrived slot, threadFenceReduction pattern, no CTA waits) runs
# chunk_grad_rows.cu's row code (moved verbatim to chunk_grad_rows.cuh) while the task's tiles and rows are in L2: one
# launch fewer, every operation in its order (backward-quick at one seed must give main35's figures row for row).
# tcfind: tcfin + the task's dq_hat / dk_hat / d g_log scratch lines dropped from L2 after the rows read them
# (discard.global.L2: no write-back of ~0.8 GB at train-h64-fixed). Against main35 (e94eb93). Then the backward /
# stress GPU tests of tcfind, the A/B at train-h64-fixed and every backward launch of tcfind under ncu.
# Run as: OUT=$OUT bash .carry/lease/s36_l2.sh
#   carry [".carry/lease", ".carry/ab/main35.tar.xz", ".carry/ab/tcfin.tar.xz", ".carry/ab/tcfind.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l2
lease_unpack main35 tcfin tcfind
lease_run tests tcfind 2 200 ./kda_gpu_tests --gtest_filter='*Backward*:*Stress*' & pt=$!
lease_same_figures backward-quick main35 tcfin tcfind
wait $pt
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/tests.log" | head -20
date -u
mkdir -p "$OUT/ab"
OUT=$OUT/ab timeout 330 bash scripts/gpu_ab.sh --builds main35,tcfin,tcfind --impl cuda-generic --rounds 2 \
  --workload train-h64-fixed
echo "gpu_ab rc=$?"; date -u
lease_ncu_launches tcfind train-h64-fixed 'products_kernel|grad_tc_kernel|grad_rows_kernel|grad_kernel'
lease_ncu_launches main35 train-h64-fixed 'products_kernel|grad_tc_kernel|grad_rows_kernel|grad_kernel'
cp "$W"/ncu-*.txt "$OUT/" 2>/dev/null
lease_checks_done
