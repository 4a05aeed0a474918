#!/usr/bin/env bash
# Session 28, call 3 (~330 s: run with timeout_s 500). Builds (.carry/ab): main (f19f2e6: call 2's gradk merged), p5b
# (3226a3b: the gradient pass's P5b loads TB rows and beta logits of 4 rows a warp before their sums), p0cp (7fa484a:
# P0 copies q, k, g rows as they lie by cp.async where rows are 16-byte aligned: one round trip, no registers). Both
# keep every operation and its order: main's figures expected (backward-quick at one fresh seed), and p0cp's backward /
# stress GPU tests (its new path); then the A/B at train-h64-fixed (2 rounds) and the gradient kernel's launches.
# Run as: OUT=$OUT bash .carry/lease/s28_l3.sh   carry [".carry/lease", ".carry/ab/main.tar.xz",
# ".carry/ab/p5b.tar.xz", ".carry/ab/p0cp.tar.xz"].
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l3
lease_unpack main p5b p0cp
pids=()
lease_run tests-p0cp p0cp 2 200 ./kda_gpu_tests --gtest_filter='*Backward*:*Stress*' & pids+=($!)
lease_same_figures backward-quick main p5b p0cp
wait "${pids[@]}"
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W"/tests-p0cp.log | head
lease_checks_done
mkdir -p "$OUT/ab"
OUT=$OUT/ab timeout 215 bash scripts/gpu_ab.sh --builds main,p5b,p0cp --impl cuda-generic --rounds 2 \
  --workload train-h64-fixed
echo "gpu_ab rc=$?"; date -u
for b in p5b p0cp; do lease_ncu_launches $b train-h64-fixed 'grad_kernel'; done
cp "$W"/ncu-*.txt "$OUT/" 2>/dev/null
date -u
