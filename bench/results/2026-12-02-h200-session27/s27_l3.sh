#!/usr/bin/env bash
# Session 27, call 3 (~480 s): issue #9, the backward's saves as bf16 planes. Builds (.carry/ab): prodpl = 9046157
# (main's kernels: the products kernel reading dO', dW and W as planes), planes = prodpl + S0, V_new, -dU and dS_end
# written as bf16 hi / lo planes by the recompute's state pass (TMA from its own planes) and the reverse pass, read
# by the products kernel without a split (new figures: CS sums hi + lo). First the A/B at train-h64-fixed (2 rounds)
# and train-h96-fixed and h64-fixed (1 round: the forward's state pass instance is rebuilt); then planes' backward /
# stress GPU tests and backward-full (lease_bwd_checks) beside the wgmma layout and Hopper forward GPU tests and the
# quick forward suite; then the products kernel of both under ncu.
# Run as: OUT=$OUT bash .carry/lease/s27_l3.sh   with carry [".carry/lease", ".carry/ab/prodpl.tar.xz",
# ".carry/ab/planes.tar.xz"].
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l3
lease_unpack prodpl planes
mkdir -p "$OUT/ab" "$OUT/ab96"
OUT=$OUT/ab timeout 150 bash scripts/gpu_ab.sh --builds prodpl,planes --impl cuda-generic --rounds 2 \
  --workload train-h64-fixed
echo "gpu_ab rc=$?"; date -u
OUT=$OUT/ab96 timeout 120 bash scripts/gpu_ab.sh --builds prodpl,planes --impl cuda-generic --rounds 1 \
  --workload train-h96-fixed --workload h64-fixed
echo "gpu_ab96 rc=$?"; date -u
pids=()
lease_run tests-layout planes 2 200 ./kda_gpu_tests --gtest_filter='*Wgmma*:*Hopper*' & pids+=($!)
lease_run fwd-quick planes 2 200 ./kda-verify --impl cuda-generic --suite quick & pids+=($!)
lease_bwd_checks planes
wait "${pids[@]}"
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W"/tests-layout.log | head
lease_checks_done
for b in planes prodpl; do lease_ncu $b train-h64-fixed products_kernel; done
cp "$W"/ncu-*.txt "$OUT/" 2>/dev/null
date -u
