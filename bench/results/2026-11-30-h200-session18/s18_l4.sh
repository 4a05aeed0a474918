#!/usr/bin/env bash
# Session 18, call 4 (~470 s): stg (wg18 3a8f7ec: the wgmma state and reverse passes with the chain's state in and
# out through shared memory in compact loops, state_stage.cuh) against main (b500ffd) and wgr (a1b6cec, the same
# kernels reading / writing the state in place). Why: ncu (call 2) put the state pass's prologue, ~4,500 straight-line
# instructions run once a chain, at ~27 us; wg1 measured +60 us at h64-mixed and +207 us at h96-uniform against main
# while h64-fixed went -67. Predicted: stg at h64-mixed and h96-uniform at or under main, h64-fixed -20..-50 vs wgr.
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l4.log") 2>&1
date -u
for b in main wgr stg; do mkdir -p /tmp/ab/$b && tar -xJf .carry/ab/$b.tar.xz -C /tmp/ab/$b; done
W=$(mktemp -d)
run() {  # name build timeout cmd...
  local n=$1 b=$2 t=$3; shift 3
  ( cd /tmp/ab/$b && OMP_NUM_THREADS=3 LD_LIBRARY_PATH=. timeout "$t" "$@" > "$W/$n.log" 2>&1; echo "== $n rc=$? $(tail -n 1 "$W/$n.log")" )
}
SF=14035002217949444255 SB=15368221980386543344
pids=()
run verify-full-stg stg 130 ./kda-verify --suite full --impl cuda-generic --seed $SF & pids+=($!)
run verify-bwdq-stg stg 130 ./kda-verify --suite backward-quick --impl cuda-generic --seed $SB & pids+=($!)
run tests-stg stg 130 ./kda_gpu_tests --gtest_filter='Own/CudaHopper.*:Cases/CudaHopperBackward.*:CudaBehaviour.*:Backends/CudaBackwardDeterminism.*' & pids+=($!)
wait "${pids[@]}"
grep -hE "FAILED|Failure|FAIL " "$W"/*.log | head -20
(cd "$W" && tar -czf "$OUT/checks.tgz" .)
date -u
OUT=$OUT timeout 230 bash scripts/gpu_ab.sh --builds main,wgr,stg --impl cuda-generic --rounds 2 \
  --workload h64-fixed --workload h64-mixed --workload h64-uniform --workload h96-fixed --workload h96-mixed \
  --workload h96-uniform
echo "gpu_ab rc=$?"
date -u
OUT=$OUT timeout 120 bash scripts/gpu_ab.sh --builds main,stg --impl cuda-generic --rounds 1 --workload train-h64-fixed
echo "gpu_ab train rc=$?"
date -u
