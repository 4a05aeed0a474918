#!/usr/bin/env bash
# Session 43, call 3: tcgate3 (tcgate2's tail reworked: the chunk-end terms once per (block, channel), the gate's
# backward a row at a time) and tcbase (main with only the first of those) checked (tcgate3: backward / stress GPU
# tests and backward-full; tcbase: the GPU tests, beside them), then gpu_ab.sh main,tcbase,tcgate3 at
# train-h64-fixed (two rounds; every run verifies the gradients against the fp64 reference), then ncu's full set with
# source of one grad_tc launch of tcgate3 and tcbase.
# Run as: OUT=$OUT bash .carry/lease/s43_l3.sh        carry [".carry/lease", ".carry/ab"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l3
lease_unpack main tcbase tcgate3
( W=$W/tcbase; mkdir -p "$W"; lease_run tests tcbase 2 220 ./kda_gpu_tests --gtest_filter='*Backward*:*Stress*'
  grep -hE "^\[  (FAILED|PASSED) " "$W/tests.log" | sed 's/^/tcbase: /' ) &
tbpid=$!
lease_bwd_checks tcgate3
wait $tbpid
lease_checks_done
lease_ab main,tcbase,tcgate3 330 train-h64-fixed
OUT=$OUT timeout 150 bash scripts/gpu_ab.sh --builds tcbase,tcgate3 --rounds 0 --ncu-count 1 --ncu 'grad_tc' \
  --workload train-h64-fixed
echo "ncu rc=$?"
date -u
