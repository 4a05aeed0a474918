#!/usr/bin/env bash
# Session 21's fourth device call (~420 s): m21 (main + s2p + lpt + pdl + tinv2 + wb + wc + dsbulk, the winners of
# calls 1-2) checked with the fixed seeds of calls 1-2 and with fresh ones, then A/B against wus on the six prefill
# workloads and the training step.
# Run as: OUT=$OUT bash .carry/lease/s21_l4.sh   with carry [".carry/lease", ".carry/ab/wus.tar.xz",
# ".carry/ab/m21.tar.xz"].
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l4.log") 2>&1
date -u
W=$(mktemp -d)
source scripts/lease_lib.sh
lease_unpack wus m21
SF=14035002217949444255 SB=15368221980386543344
F='Wgmma*:Own/CudaHopper.*:Cases/CudaHopperBackward.*:CudaBehaviour.*:Backends/CudaBackwardDeterminism.*'
pids=()
lease_run verify-full m21 4 240 ./kda-verify --suite full --impl cuda-generic --seed $SF & pids+=($!)
lease_run verify-full-fresh m21 4 240 ./kda-verify --suite full --impl cuda-generic & pids+=($!)
lease_run verify-bwdq m21 2 200 ./kda-verify --suite backward-quick --impl cuda-generic --seed $SB & pids+=($!)
lease_run verify-bwdq-fresh m21 2 200 ./kda-verify --suite backward-quick --impl cuda-generic & pids+=($!)
lease_run tests m21 2 220 ./kda_gpu_tests & pids+=($!)
wait "${pids[@]}"  # never a bare wait (the tee above)
grep -hE "FAILED|Failure|FAIL |seed" "$W"/*.log | head -20
(cd "$W" && tar -czf "$OUT/checks.tgz" .)
date -u
for f in verify-full verify-full-fresh; do grep -q "39 passed, 0 failed" "$W/$f.log" || { echo "$f failed"; exit 0; }; done
for f in verify-bwdq verify-bwdq-fresh; do grep -q "21 passed, 0 failed" "$W/$f.log" || { echo "$f failed"; exit 0; }; done
mkdir -p "$OUT/prefill"
OUT=$OUT/prefill timeout 170 bash scripts/gpu_ab.sh --builds wus,m21 --impl cuda-generic --rounds 1 \
  --workload h64-fixed --workload h64-mixed --workload h64-uniform --workload h96-fixed --workload h96-mixed \
  --workload h96-uniform
echo "gpu_ab prefill rc=$?"; date -u
mkdir -p "$OUT/train"
OUT=$OUT/train timeout 80 bash scripts/gpu_ab.sh --builds wus,m21 --impl cuda-generic --rounds 1 \
  --workload train-h64-fixed
echo "gpu_ab train rc=$?"; date -u
