#!/usr/bin/env bash
# Session 44, call 3 (~500 s): rv3 (main db087b6 + b6ba863: the reverse pass's tile prefetch ranges formed once, dO'
# converted under one dtype switch, the previous chunk's record read at the top; U and the decays of the state and
# reverse passes read with ld.shared, not generic loads) against main (= the archive `both`, db087b6).
# Checks on rv3: the backward / stress GPU tests and backward-full whole, beside kda-verify --suite full (the forward:
# the state pass changed); then the other GPU tests; then gpu_ab.sh both,rv3 at train-h64-fixed (forward and
# backward), two rounds; ncu of rv3's first state / reverse launches as far as the time allows.
# Run as: OUT=$OUT bash .carry/lease/s44_l3.sh        carry [".carry/lease", ".carry/ab"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l3
lease_unpack both rv3
lease_run fwdfull rv3 2 240 ./kda-verify --impl cuda-generic --suite full & pf=$!
lease_bwd_checks rv3
wait $pf
lease_passed fwdfull && echo "rv3: forward full passed" || echo "rv3: forward full FAILED"
grep -hE " FAIL |kda-verify:" "$W/fwdfull.log" | head
lease_run gtests rv3 4 150 ./kda_gpu_tests --gtest_filter='-*Backward*:*Stress*'
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/gtests.log" | head
lease_checks_done
lease_ab both,rv3 200 train-h64-fixed
OUT=$OUT timeout 70 bash scripts/gpu_ab.sh --builds rv3 --rounds 0 --ncu-count 3 --ncu 'state_wgmma|reverse_wgmma' \
  --workload train-h64-fixed
echo "ncu rc=$?"
date -u
