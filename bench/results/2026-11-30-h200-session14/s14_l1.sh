#!/usr/bin/env bash
# Session 14 call 1: the three kernel commits landed without a GPU run (707cbfc, 7bc5ffd tf32_operand, 9025f6d S3
# balance), checked and timed. carry .carry/lease .carry/ab: combo = 9a6a6f7 (last measured), tf32op = 7bc5ffd,
# main = 282698c. Seeds are session 13's combo runs, so tf32op's figures can be compared to combo's line by line.
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l1.log") 2>&1
date -u
for b in tf32op main; do mkdir -p /tmp/ab/$b && tar -xJf .carry/ab/$b.tar.xz -C /tmp/ab/$b; done
W=$(mktemp -d)
run() {  # name build timeout cmd...
  local n=$1 b=$2 t=$3; shift 3
  ( cd /tmp/ab/$b && OMP_NUM_THREADS=3 LD_LIBRARY_PATH=. timeout "$t" "$@" > "$W/$n.log" 2>&1; echo "== $n rc=$? $(tail -n 1 "$W/$n.log")" )
}
SF=14035002217949444255 SB=15368221980386543344 SD=1862009593585421415
pids=()
run verify-full-tf32op tf32op 260 ./kda-verify --suite full --impl cuda-generic --seed $SF & pids+=($!)
run verify-full-main main 260 ./kda-verify --suite full --impl cuda-generic --seed $SF & pids+=($!)
run verify-bwdq-tf32op tf32op 200 ./kda-verify --suite backward-quick --impl cuda-generic --seed $SB & pids+=($!)
run verify-bwdq-main main 200 ./kda-verify --suite backward-quick --impl cuda-generic --seed $SB & pids+=($!)
run verify-dec-main main 150 ./kda-verify --suite decode-full --impl cuda-generic --seed $SD & pids+=($!)
run tests-main main 260 ./kda_gpu_tests --gtest_filter='*CudaChunked*:*Behaviour*:*Decode*:*CudaBackward*-*CudaDecodePaths*b512*:Large/CudaBackward.*' & pids+=($!)
wait "${pids[@]}"
grep -hE 'FAIL|Failure' "$W"/*.log | head -20
(cd "$W" && tar -cf "$OUT/checks.tar" .)
date -u
OUT=$OUT timeout 300 bash scripts/gpu_ab.sh --builds combo,tf32op,main --impl cuda-generic --rounds 2 \
  --workload h64-fixed --workload h96-fixed --workload serve-256x32 --workload train-h64-fixed
echo "gpu_ab rc=$?"
date -u
