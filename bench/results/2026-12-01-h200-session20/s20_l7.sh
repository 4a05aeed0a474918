#!/usr/bin/env bash
# Session 20, call 7 (~330 s, the session's last): wus3 (37fc0e7: the prepare kernel's bulk copies from one lane a
# warp, the 3xTF32 branch staged too, A_qk in 8-byte stores) against wus (690212d): checks, A/B rounds 2 on four
# prefill workloads and rounds 1 on train-h64-fixed, then wus3 beside FLA (s20_l3_prepared.sh, BUILD=wus3).
# Predicted: prepare -20..-50 us at h64-fixed against wus (the R2UR loop was 8.6% of its samples); train-h64
# backward -20..-60 (the recompute's [W | U] staged).
# Run as: OUT=$OUT bash .carry/lease/s20_l7.sh   with carry [".carry/lease", ".carry/ab/wus.tar.xz",
# ".carry/ab/wus.COMMIT", ".carry/ab/wus3.tar.xz", ".carry/ab/wus3.COMMIT", ".whl", ".carry/triton.tgz"].
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l7.log") 2>&1
date -u
W=$(mktemp -d)
source scripts/lease_lib.sh
lease_unpack wus wus3
SF=14035002217949444255 SB=15368221980386543344
F='Wgmma*:Own/CudaHopper.*:Cases/CudaHopperBackward.*:CudaBehaviour.*:Backends/CudaBackwardDeterminism.*'
pids=()
lease_run verify-full-wus3 wus3 10 150 ./kda-verify --suite full --impl cuda-generic --seed $SF & pids+=($!)
lease_run verify-bwdq-wus3 wus3 3 150 ./kda-verify --suite backward-quick --impl cuda-generic --seed $SB & pids+=($!)
lease_run tests-wus3 wus3 2 150 ./kda_gpu_tests --gtest_filter="$F" & pids+=($!)
wait "${pids[@]}"  # never a bare wait (the tee above)
grep -hE "FAILED|Failure|FAIL " "$W"/*.log | head -20
(cd "$W" && tar -czf "$OUT/checks.tgz" .)
date -u
grep -q "39 passed, 0 failed" "$W/verify-full-wus3.log" && grep -q "21 passed, 0 failed" "$W/verify-bwdq-wus3.log" ||
  { echo "wus3 failed its checks: not timed"; exit 0; }
OUT=$OUT timeout 110 bash scripts/gpu_ab.sh --builds wus,wus3 --impl cuda-generic --rounds 2 \
  --workload h64-fixed --workload h64-uniform --workload h96-fixed --workload h96-uniform
echo "gpu_ab prefill rc=$?"
date -u
mkdir -p "$OUT/train"
OUT=$OUT/train timeout 75 bash scripts/gpu_ab.sh --builds wus,wus3 --impl cuda-generic --rounds 1 \
  --workload train-h64-fixed
echo "gpu_ab train rc=$?"
date -u
mkdir -p "$OUT/peers"
BUILD=wus3 OUT=$OUT/peers timeout 110 bash .carry/lease/s20_l3_prepared.sh
date -u
