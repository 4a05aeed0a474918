#!/usr/bin/env bash
# Session 39, call 2 (~560 s): pf (CS inside the wgmma P1's pass V, pass V's first slice issued before dO' is staged)
# and pf2 (pf plus P2 / P3's operands prefetched to L2 at P1's start) against main. Checks on pf2 (it holds pf's code;
# the prefetch changes no result): the layout / P1 probes and the backward and stress GPU tests, backward-quick (its
# bwd_k128_v128 case takes the products kernel's wgmma instance) and backward-full whole; then gpu_ab.sh over the
# three builds at train-h64-fixed, 2 rounds; then the products launches of pf2 and main under ncu.
# Run as: OUT=$OUT bash .carry/lease/s39_l2.sh
#   carry [".carry/lease", ".carry/ab/main.tar.xz", ".carry/ab/pf.tar.xz", ".carry/ab/pf2.tar.xz", ".carry/ab/*.COMMIT"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l2
lease_unpack main pf pf2
pids=()
lease_run tests pf2 4 200 ./kda_gpu_tests --gtest_filter='*Wgmma*:*Backward*:*Stress*' & pids+=($!)
lease_run bq pf2 3 200 ./kda-verify --impl cuda-generic --suite backward-quick & pids+=($!)
lease_bwd_full pf2 & pids+=($!)
wait "${pids[@]}"
for n in bq bwdfull-a bwdfull-b bwdfull-c bwdfull-d; do
  lease_passed $n && echo "pf2: $n passed" || echo "pf2: $n FAILED"
done
grep -hE "^bwd_" "$W"/bq.log "$W"/bwdfull-*.log | cut -c1-160
grep -hE "^\[  (FAILED|PASSED) |tests? ran|products P1" "$W/tests.log" | head -20
lease_checks_done
lease_ab main,pf,pf2 330 train-h64-fixed
lease_ncu_launches pf2 train-h64-fixed products
lease_ncu_launches main train-h64-fixed products
(cd "$W" && tar -czf "$OUT/ncu.tgz" ncu-launches-*.txt)
date -u
