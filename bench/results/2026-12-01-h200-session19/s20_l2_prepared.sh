#!/usr/bin/env bash
# Prepared in session 19 for session 20's second device call (~450 s): main's checks, the backward's A/B of main,
# revtma, ssp, qgb and nb (their checks ran in s20_l1; drop a build whose backward-quick failed there), then ncu with
# source of BUILD's state and reverse passes and prepare kernel, and of main's reverse pass (BUILD: the forward's
# winner of s20_l1, default ssp).
# Run as: BUILD=ssp OUT=$OUT bash .carry/lease/s20_l2_prepared.sh   with carry [".carry/lease", ".carry/ab"].
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l2.log") 2>&1
date -u
BUILD=${BUILD:-ssp}
# main (feb64fa) is the first build of session 19's refactor of the passes' prologue, prefetch and dO' loads (SASS:
# register renaming and a few integer ops): its checks, before it serves as the train A/B's baseline.
W=$(mktemp -d)
source scripts/lease_lib.sh
lease_unpack main
SF=14035002217949444255 SB=15368221980386543344
pids=()
lease_run verify-full-main main 10 200 ./kda-verify --suite full --impl cuda-generic --seed $SF & pids+=($!)
lease_run verify-bwdq-main main 4 200 ./kda-verify --suite backward-quick --impl cuda-generic --seed $SB & pids+=($!)
F='Wgmma*:Own/CudaHopper.*:Cases/CudaHopperBackward.*:CudaBehaviour.*:Backends/CudaBackwardDeterminism.*'
lease_run tests-main main 2 200 ./kda_gpu_tests --gtest_filter="$F" & pids+=($!)
wait "${pids[@]}"  # never a bare wait (the tee above)
grep -hE "FAILED|Failure|FAIL " "$W"/*.log | head -20
(cd "$W" && tar -czf "$OUT/checks-main.tgz" .)
date -u
OUT=$OUT timeout 220 bash scripts/gpu_ab.sh --builds main,revtma,ssp,qgb,nb --impl cuda-generic --rounds 1 \
  --workload train-h64-fixed
echo "gpu_ab train rc=$?"
date -u
# ... and of the prepare kernel (1.27 ms of h64-fixed's 1.82 ms forward, 1.92 of h96-fixed's 2.95: the part of the
# forward that issue #3 now hangs on; its last source-level ncu is session 11's, at 1.91 ms).
for x in "$BUILD state_wgmma h64-fixed" "$BUILD reverse_wgmma train-h64-fixed" "main reverse_wgmma train-h64-fixed" \
    "$BUILD prepare_kernel h64-fixed"; do
  set -- $x; mkdir -p "$OUT/ncu-$1-$2"
  OUT=$OUT/ncu-$1-$2 timeout 60 bash scripts/gpu_ab.sh --builds $1 --impl cuda-generic --rounds 0 --ncu $2 \
    --ncu-count 1 --workload $3
  echo "gpu_ab ncu $x rc=$?"
done
date -u
