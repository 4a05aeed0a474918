#!/usr/bin/env bash
# Session 13 call 4 (the merged main): carry .carry/lease .carry/ab (main = 48024cc's archive, combo = merged main).
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l4.log") 2>&1
date -u
for b in combo; do mkdir -p /tmp/ab/$b && tar -xJf .carry/ab/$b.tar.xz -C /tmp/ab/$b; done
W=$(mktemp -d)
run() {  # name build timeout cmd...
  local n=$1 b=$2 t=$3; shift 3
  ( cd /tmp/ab/$b && OMP_NUM_THREADS=4 LD_LIBRARY_PATH=. timeout "$t" "$@" > "$W/$n.log" 2>&1; echo "== $n rc=$? $(tail -1 "$W/$n.log")" )
}
pids=()
run verify-full-combo combo 200 ./kda-verify --suite full --impl cuda-generic & pids+=($!)
run verify-bwdq-combo combo 150 ./kda-verify --suite backward-quick --impl cuda-generic & pids+=($!)
run verify-dec-combo combo 150 ./kda-verify --suite decode-full --impl cuda-generic & pids+=($!)
run tests-combo combo 200 ./kda_gpu_tests --gtest_filter='*CudaChunked*:*Behaviour*:*Decode*:*CudaBackward*-*CudaDecodePaths*b512*:Large/CudaBackward.*' & pids+=($!)
wait "${pids[@]}"
grep -hE 'FAIL|Failure' "$W"/*.log | head -20
(cd "$W" && tar -cf "$OUT/checks.tar" .)
date -u
OUT=$OUT timeout 200 bash scripts/gpu_ab.sh --builds main,combo --impl cuda-generic --rounds 1 \
  --workload h64-fixed --workload h96-fixed --workload h64-mixed --workload train-h64-fixed \
  --workload decode-h32-b1 --workload decode-h12-b1 --workload decode-h32-b32 --workload decode-h32-b256
echo "gpu_ab rc=$?"
date -u
