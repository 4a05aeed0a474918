#!/usr/bin/env bash
# Session 69, call 3: why pipe (call 2) was level. Its launch took 2.83 ms under ncu, the products' 1.64 + grad_tc's
# 1.19 exactly: either each kernel's CTAs are bound by their own latency (two CTAs an SM, so a neighbour of the other
# kind changes nothing), or the clusters of two put both CTAs of a job on one SM, so an SM never held products beside a
# stage. pipe2 (experiment branch) runs the pipe without clusters (the K = 128 stage halves as independent CTAs, dq / dk
# finished by grad_rows, as before session 45's qkfin); nqk is the same build without the pipe (its baseline).
# 1  checks: backward-quick at one seed, nqk beside pipe2 (the same figures), pipe2's backward / stress GPU tests;
# 2  ncu of the gradient pass's launches in one train-h64-fixed step, both builds;
# 3  gpu_ab nqk,pipe2 at train-h64-fixed, 2 rounds.
# Run as OUT=$OUT bash .carry/lease/s69_l3.sh with .carry/slim.sh on, carry [".carry/lease", ".carry/ab"] (LIMIT
# below the budget left); returns s69_l3.log, final.tgz, ab/results.tar.
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s69_l3
lease_unpack nqk pipe2
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lim=${LIMIT:-500}
lease_run btests-pipe2 pipe2 4 150 ./kda_gpu_tests --gtest_filter='*Backward*:*Stress*' & pt=$!
lease_same_figures backward-quick nqk pipe2
wait $pt
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/btests-pipe2.log" | head -5
echo "checks done at $SECONDS s"
lease_checks_done final
for b in nqk pipe2; do lease_ncu_launches "$b" train-h64-fixed 'products|grad_tc|grad_pipe|grad_rows'; done
echo "ncu done at $SECONDS s"
left=$((lim - SECONDS - 15))
[ "$left" -gt 60 ] && lease_ab nqk,pipe2 "$left" train-h64-fixed
(cd "$W" && tar -czf "$OUT/final.tgz" .)
echo "done at $SECONDS s"
date -u
