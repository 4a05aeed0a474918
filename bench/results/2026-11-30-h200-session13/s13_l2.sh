#!/usr/bin/env bash
# Session 13 call 2 (prefill + decode): carry .carry/lease .carry/ab (main, gatefast, aqk1, s1mma, decb1).
# Writes $OUT/l2.log, $OUT/checks.tar (verifiers, tests), $OUT/results.tar (gpu_ab).
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l2.log") 2>&1
date -u
for b in main s1mma decb1; do mkdir -p /tmp/ab/$b && tar -xJf .carry/ab/$b.tar.xz -C /tmp/ab/$b; done
W=$(mktemp -d)
run() {  # name build timeout cmd...
  local n=$1 b=$2 t=$3; shift 3
  ( cd /tmp/ab/$b && OMP_NUM_THREADS=3 LD_LIBRARY_PATH=. timeout "$t" "$@" > "$W/$n.log" 2>&1; echo "== $n rc=$? $(tail -1 "$W/$n.log")" )
}
pids=()
run verify-full-s1mma s1mma 220 ./kda-verify --suite full --impl cuda-generic --json "$W/verify-full-s1mma.json" & pids+=($!)
run verify-bwdq-s1mma s1mma 150 ./kda-verify --suite backward-quick --impl cuda-generic --seed 12 & pids+=($!)
run tests-s1mma s1mma 220 ./kda_gpu_tests --gtest_filter='*CudaChunked*:*Behaviour*' & pids+=($!)
run tests-decb1 decb1 220 ./kda_gpu_tests --gtest_filter='*Decode*-*CudaDecodePaths*b512*' & pids+=($!)
run verify-dec-decb1 decb1 150 ./kda-verify --suite decode-full --impl cuda-generic --seed 12 & pids+=($!)
run verify-dec-main main 150 ./kda-verify --suite decode-full --impl cuda-generic --seed 12 & pids+=($!)
wait "${pids[@]}"
grep -hE 'FAIL|Failure' "$W"/*.log | head -20
diff <(sed 's/ *[0-9.]*s$//' "$W/verify-dec-main.log") <(sed 's/ *[0-9.]*s$//' "$W/verify-dec-decb1.log") > "$W/decode-diff.txt" && echo "decode-full figures identical (main vs decb1, seed 12)" || { echo "decode-full figures differ:"; head -20 "$W/decode-diff.txt"; }
(cd "$W" && tar -cf "$OUT/checks.tar" .)
date -u
OUT=$OUT timeout 240 bash scripts/gpu_ab.sh --builds main,gatefast,aqk1,s1mma --impl cuda-generic --rounds 2 \
  --workload h64-fixed --workload serve-256x32
echo "gpu_ab prefill rc=$?"
date -u
OUT=$OUT timeout 100 bash scripts/gpu_ab.sh --builds main,decb1 --impl cuda-generic --rounds 2 \
  --workload decode-h32-b1 --workload decode-h12-b1 --workload decode-h32-b8 --workload decode-h32-b32 \
  --workload decode-h32-b256 --workload decode-h32-b1-fused
echo "gpu_ab decode rc=$?"
date -u
