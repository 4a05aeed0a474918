#!/usr/bin/env bash
# Session 40, call 2 (~450 s; call 1 ran the same with both archives corrupted by two builds writing one .carry/bin.tar.xz: its figures are not kept): tma (main plus the products kernel's wgmma P1 slices copied by TMA: three boxes a
# slice issued by one thread, completing on the slot's mbarrier, instead of six cp.async copies a thread) against
# main (5149cca). Checks on tma (it holds main's code, whose backward-full session 39 did not run): the wgmma /
# backward / stress GPU tests and backward-full whole; ncu of every products launch of a train-h64-fixed step on both
# builds; then gpu_ab.sh main,tma at train-h64-fixed, two rounds.
# Run as: OUT=$OUT bash .carry/lease/s40_l2.sh
#   carry [".carry/lease", ".carry/ab/main.tar.xz", ".carry/ab/tma.tar.xz", ".carry/ab/main.COMMIT",
#          ".carry/ab/tma.COMMIT"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l2
lease_unpack main tma
pids=()
lease_run wgmma tma 2 100 ./kda_gpu_tests --gtest_filter='*Wgmma*' & pids+=($!)
lease_bwd_checks tma & pids+=($!)
wait "${pids[@]}"
grep -hE "^\[  (FAILED|PASSED) |tests? ran|products P1" "$W/wgmma.log" | head -10
lease_checks_done
lease_ncu_launches main train-h64-fixed products
lease_ncu_launches tma train-h64-fixed products
lease_ab main,tma 200 train-h64-fixed
