#!/usr/bin/env bash
# Session 38, call 4 (~400 s): p2w (p1w plus the products kernel's P2 on sm_90a wgmma) against p1w (= main b01b294's
# kernels): the layout probes, ProductsMatchFp64 and the backward / stress GPU tests beside backward-full whole, then
# the A/B at train-h64-fixed and p2w's products launches under ncu.
# Run as: OUT=$OUT bash .carry/lease/s38_l4.sh
#   carry [".carry/lease", ".carry/ab/p1w.tar.xz", ".carry/ab/p2w.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l4
lease_unpack p1w p2w
lease_run tests p2w 2 230 ./kda_gpu_tests --gtest_filter='*Wgmma*:*Backward*:*Stress*' & p1=$!
lease_bwd_full p2w & p2=$!
wait $p1 $p2
for n in bwdfull-a bwdfull-b bwdfull-c bwdfull-d; do lease_passed $n && echo "p2w: $n passed" || echo "p2w: $n FAILED"; done
grep -hE "^bwd_" "$W"/bwdfull-*.log | cut -c1-160
grep -hE "^\[  (FAILED|PASSED) |tests? ran|products:" "$W/tests.log" | head -20
lease_checks_done
lease_ab p1w,p2w 200 train-h64-fixed
lease_ncu_launches p2w train-h64-fixed 'products'
date -u
