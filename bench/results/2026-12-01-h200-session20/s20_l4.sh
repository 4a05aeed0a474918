#!/usr/bin/env bash
# Session 20, call 3 (~300 s): checks of m20 (main with revtma + ssp merged: 123eba8) and wn (m20 + tile_rows + wide +
# nb rebased without qgb: 58dfd45), then their A/B on h64-fixed, h96-fixed, h96-uniform (rounds 2) and train-h64-fixed
# (rounds 1). m20's lines must equal ssp's of calls 1-2 but the timing (same SASS as ssp + main's refactor).
# Run as: OUT=$OUT bash .carry/lease/s20_l4.sh   with carry [".carry/lease", ".carry/ab"].
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l4.log") 2>&1
date -u
W=$(mktemp -d)
source scripts/lease_lib.sh
lease_unpack m20 wn
SF=14035002217949444255 SB=15368221980386543344
pids=()
F='Wgmma*:Own/CudaHopper.*:Cases/CudaHopperBackward.*:CudaBehaviour.*:Backends/CudaBackwardDeterminism.*'
for b in m20 wn; do
  lease_run verify-full-$b $b 5 240 ./kda-verify --suite full --impl cuda-generic --seed $SF & pids+=($!)
  lease_run verify-bwdq-$b $b 2 200 ./kda-verify --suite backward-quick --impl cuda-generic --seed $SB & pids+=($!)
  lease_run tests-$b $b 1 200 ./kda_gpu_tests --gtest_filter="$F" & pids+=($!)
done
wait "${pids[@]}"  # never a bare wait (the tee above)
grep -hE "FAILED|Failure|FAIL " "$W"/*.log | head -20
(cd "$W" && tar -czf "$OUT/checks.tgz" .)
date -u
ok=m20
grep -q "39 passed, 0 failed" "$W/verify-full-wn.log" && grep -q "21 passed, 0 failed" "$W/verify-bwdq-wn.log" && ok=m20,wn
OUT=$OUT timeout 150 bash scripts/gpu_ab.sh --builds $ok --impl cuda-generic --rounds 2 \
  --workload h64-fixed --workload h96-fixed --workload h96-uniform
echo "gpu_ab prefill rc=$?"
date -u
mkdir -p "$OUT/train"
OUT=$OUT/train timeout 120 bash scripts/gpu_ab.sh --builds $ok --impl cuda-generic --rounds 1 --workload train-h64-fixed
echo "gpu_ab train rc=$?"
date -u
