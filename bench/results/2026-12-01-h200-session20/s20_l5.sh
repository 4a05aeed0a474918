#!/usr/bin/env bash
# Session 20, call 5 (~280 s): wus (690212d: the prepare kernel's [W | U] staged in shared memory, out in bulk
# copies) against main (wn = 58dfd45): checks (full, backward-quick, GPU tests), A/B rounds 2 on four prefill
# workloads, ncu with source of wus's prepare kernel at h64-fixed. Predicted: prepare -40..-100 us at h64-fixed
# (S5's stores and the exit's drain were ~14% of its stall samples), h96 -60..-150; the backward unchanged.
# Run as: OUT=$OUT bash .carry/lease/s20_l5.sh   with carry [".carry/lease", ".carry/ab"].
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l5.log") 2>&1
date -u
W=$(mktemp -d)
source scripts/lease_lib.sh
lease_unpack wn wus
SF=14035002217949444255 SB=15368221980386543344
F='Wgmma*:Own/CudaHopper.*:Cases/CudaHopperBackward.*:CudaBehaviour.*:Backends/CudaBackwardDeterminism.*'
pids=()
lease_run verify-full-wus wus 10 240 ./kda-verify --suite full --impl cuda-generic --seed $SF & pids+=($!)
lease_run verify-bwdq-wus wus 3 200 ./kda-verify --suite backward-quick --impl cuda-generic --seed $SB & pids+=($!)
lease_run tests-wus wus 2 200 ./kda_gpu_tests --gtest_filter="$F" & pids+=($!)
wait "${pids[@]}"  # never a bare wait (the tee above)
grep -hE "FAILED|Failure|FAIL " "$W"/*.log | head -20
(cd "$W" && tar -czf "$OUT/checks.tgz" .)
date -u
grep -q "39 passed, 0 failed" "$W/verify-full-wus.log" || { echo "wus failed its checks: not timed"; exit 0; }
OUT=$OUT timeout 150 bash scripts/gpu_ab.sh --builds wn,wus --impl cuda-generic --rounds 2 \
  --workload h64-fixed --workload h64-uniform --workload h96-fixed --workload h96-uniform
echo "gpu_ab prefill rc=$?"
date -u
mkdir -p "$OUT/ncu-wus-prepare"
OUT=$OUT/ncu-wus-prepare timeout 60 bash scripts/gpu_ab.sh --builds wus --impl cuda-generic --rounds 0 \
  --ncu prepare_kernel --ncu-count 1 --workload h64-fixed
echo "gpu_ab ncu rc=$?"
date -u
