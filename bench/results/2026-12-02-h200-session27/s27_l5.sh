#!/usr/bin/env bash
# Session 27, call 5 (~230 s, the session's last ~365 s of device time): issue #9, the planes' second form. Builds
# (.carry/ab): prodpl = 9046157 (main's kernels), planes = 9de1ade (d7232e5 + the reverse pass storing dS_end
# and -dU as TMA stores of its own planes). The A/B at train-h64-fixed (1 round: the budget), then planes' backward /
# stress GPU tests and backward-full (lease_bwd_checks) beside the wgmma layout and Hopper forward GPU tests.
# Run as: OUT=$OUT bash .carry/lease/s27_l5.sh   with carry [".carry/lease", ".carry/ab/prodpl.tar.xz",
# ".carry/ab/planes.tar.xz"].
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l5
lease_unpack prodpl planes
mkdir -p "$OUT/ab"
OUT=$OUT/ab timeout 90 bash scripts/gpu_ab.sh --builds planes,prodpl --impl cuda-generic --rounds 1 \
  --workload train-h64-fixed
echo "gpu_ab rc=$?"; date -u
grep -hE "^== |backward median" "$OUT/l5.log" | tail -4
pids=()
lease_run tests-layout planes 2 150 ./kda_gpu_tests --gtest_filter='*Wgmma*:*Hopper*' & pids+=($!)
lease_bwd_checks planes
wait "${pids[@]}"
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W"/tests-layout.log | head
lease_checks_done
