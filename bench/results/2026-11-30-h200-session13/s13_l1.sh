#!/usr/bin/env bash
# Session 13 call 1 (prefill): carry .carry/lease .carry/ab (main, gatefast, aqk1, s1mma archives).
# Writes $OUT/results.tar (gpu_ab) and $OUT/l1.log.
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l1.log") 2>&1
date -u
# verify full on s1mma (factored diagonal blocks + one-TF32 A_qk), backward-quick on it (the backward recomputes phase 1)
mkdir -p /tmp/ab/s1mma && tar -xJf .carry/ab/s1mma.tar.xz -C /tmp/ab/s1mma
W=$(mktemp -d)
( cd /tmp/ab/s1mma && LD_LIBRARY_PATH=. timeout 200 ./kda-verify --suite full --impl cuda-generic --json "$W/verify-full-s1mma.json" > "$W/verify-full-s1mma.log" 2>&1; echo "verify full rc=$?" ) &
( cd /tmp/ab/s1mma && LD_LIBRARY_PATH=. timeout 200 ./kda-verify --suite backward-quick --impl cuda-generic --json "$W/verify-bwdq-s1mma.json" > "$W/verify-bwdq-s1mma.log" 2>&1; echo "verify bwdq rc=$?" ) &
wait
grep -E 'FAIL|kda-verify:' "$W"/verify-*.log | head -20
grep -E 'factor|spiked' "$W/verify-full-s1mma.log" | head
(cd "$W" && tar -cf "$OUT/verify.tar" .)
date -u
OUT=$OUT timeout 420 bash scripts/gpu_ab.sh --builds main,gatefast,aqk1,s1mma --impl cuda-generic \
  --tests '*CudaChunked*:*Behaviour*' --rounds 2 \
  --workload h64-fixed --workload h96-fixed --workload serve-256x32 --workload h64-mixed
echo "gpu_ab rc=$?"
date -u
