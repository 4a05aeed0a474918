#!/usr/bin/env bash
# Session 38, call 1 (~400 s): p1w (the products kernel's P1 on sm_90a wgmma, hopper/products_wgmma.cuh) against rue
# (= main's kernels, 49aca11): its layout probes and backward / stress GPU tests, backward-quick beside rue's at one seed
# (bf16 gradients), backward-full whole, then the A/B at train-h64-fixed and the step's products launches under ncu.
# Run as: OUT=$OUT bash .carry/lease/s38_l1.sh
#   carry [".carry/lease", ".carry/ab/rue.tar.xz", ".carry/ab/p1w.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l1
lease_unpack rue p1w
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
lease_run tests p1w 2 230 ./kda_gpu_tests --gtest_filter='*Wgmma*:*Backward*:*Stress*' & p1=$!
lease_bwd_full p1w & p2=$!
lease_same_figures "backward-quick --input-dtype-grads" rue p1w
wait $p1 $p2
for n in bwdfull-a bwdfull-b bwdfull-c bwdfull-d; do lease_passed $n && echo "p1w: $n passed" || echo "p1w: $n FAILED"; done
grep -hE "^bwd_" "$W"/bwdfull-*.log | cut -c1-160
grep -hE "^\[  (FAILED|PASSED) |tests? ran|Products" "$W/tests.log" | head -20
grep -hE "^bwd_" "$W"/same-*-rue.log | cut -c1-150 | head -30
grep -hE "^bwd_" "$W"/same-*-p1w.log | cut -c1-150 | head -30
lease_checks_done
lease_ab rue,p1w 200 train-h64-fixed
lease_ncu_launches p1w train-h64-fixed 'products'
lease_ncu_launches rue train-h64-fixed 'products'
date -u
