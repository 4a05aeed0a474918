#!/usr/bin/env bash
# Session 40, call 4 (~470 s, the budget's last): two products-kernel changes against main40 (2d18a87): nofence
# (56403ac, no __threadfence before P3: the CTA barrier alone orders BV / BK's stores before their cp.async reads)
# and both (26db169: nofence plus CS's S0 loads a slice ahead). Checks on both (it holds nofence's code): the wgmma,
# backward and stress GPU tests and backward-full whole; backward-quick on all three at one seed (neither change
# alters an operation: the same figures expected). Then gpu_ab.sh main40,nofence,both at train-h64-fixed, two rounds.
# Run as: OUT=$OUT bash .carry/lease/s40_l4.sh
#   carry [".carry/lease", ".carry/ab/main40.tar.xz", ".carry/ab/nofence.tar.xz", ".carry/ab/both.tar.xz",
#          ".carry/ab/main40.COMMIT", ".carry/ab/nofence.COMMIT", ".carry/ab/both.COMMIT"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l4
lease_unpack main40 nofence both
pids=()
lease_run wgmma both 2 100 ./kda_gpu_tests --gtest_filter='*Wgmma*' & pids+=($!)
lease_bwd_checks both & pids+=($!)
lease_same_figures backward-quick main40 nofence both & pids+=($!)
wait "${pids[@]}"
grep -hE "^\[  (FAILED|PASSED) |tests? ran|products P1" "$W/wgmma.log" | head -10
lease_checks_done
lease_ab main40,nofence,both 250 train-h64-fixed
