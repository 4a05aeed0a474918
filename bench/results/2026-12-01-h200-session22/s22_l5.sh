#!/usr/bin/env bash
# Session 22's fifth device call (~330 s): p4split (939112f, on main 7fad668): the gradient pass's P4 on two threads a
# channel (the block pairs on threads K .. 2K - 1, their dq / dk / dg through scratch, added in P6; P5a after P4 at
# K = 128). ncu (call 4): P4 ~60% of the pass's 6.6 ms on 4 of 8 warps. Predicted train-h64-fixed backward
# -0.5..-1.5 ms (P4 ~4 ms -> ~2.3, P5a serial +0.3, the scratch reads in P6 +0.1..0.2); values not bit-identical
# (sum order). Checks: backward-quick at session 19's seed and a fresh one, backward-full (every case, in four
# processes: the three 8192-token workloads alone), the backward GPU tests; then A/B against m22b (main's kernels).
# Run as: OUT=$OUT bash .carry/lease/s22_l5.sh   with carry [".carry/lease", ".carry/ab/m22b.tar.xz",
# ".carry/ab/p4split.tar.xz"].
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l5
lease_unpack m22b p4split
SB=15368221980386543344
F='Cases/CudaHopperBackward.*:Backends/CudaBackwardDeterminism.*:*Backward*'
V=(./kda-verify --impl cuda-generic)
pids=()
lease_run verify-bwdq p4split 2 150 "${V[@]}" --suite backward-quick --seed $SB & pids+=($!)
lease_run verify-bwdq-fresh p4split 2 150 "${V[@]}" --suite backward-quick & pids+=($!)
lease_run tests p4split 2 150 ./kda_gpu_tests --gtest_filter="$F" & pids+=($!)
lease_run bwdfull-a p4split 3 170 "${V[@]}" --suite backward-full --filter standard_recipe & pids+=($!)
lease_run bwdfull-b p4split 3 170 "${V[@]}" --suite backward-full --filter half_channels & pids+=($!)
lease_run bwdfull-c p4split 3 170 "${V[@]}" --suite backward-full --filter every_channel & pids+=($!)
lease_run bwdfull-d p4split 2 170 "${V[@]}" --suite backward-full --filter softplus_,saturated,gates_exactly,dead_and,\
near_identical,beta_near_0,h0_,packed,one_sequence,grouped,k_first,log_decay,fp16_bounded,k128_v64 & pids+=($!)
wait "${pids[@]}"  # never a bare wait (the tee above)
lease_checks_done
lease_passed verify-bwdq && lease_passed verify-bwdq-fresh || { echo "p4split failed backward-quick: not timed"; exit 0; }
mkdir -p "$OUT/train"
OUT=$OUT/train timeout 130 bash scripts/gpu_ab.sh --builds m22b,p4split --impl cuda-generic --rounds 2 \
  --workload train-h64-fixed
echo "gpu_ab train rc=$?"; date -u
mkdir -p "$OUT/train96"
OUT=$OUT/train96 timeout 100 bash scripts/gpu_ab.sh --builds m22b,p4split --impl cuda-generic --rounds 1 \
  --workload train-h96-fixed
echo "gpu_ab train96 rc=$?"; date -u
