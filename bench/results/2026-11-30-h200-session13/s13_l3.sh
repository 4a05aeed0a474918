#!/usr/bin/env bash
# Session 13 call 3 (backward): carry .carry/lease .carry/ab (main, gradgate, bwdlat, bwdall).
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l3.log") 2>&1
date -u
for b in main gradgate bwdlat bwdall; do mkdir -p /tmp/ab/$b && tar -xJf .carry/ab/$b.tar.xz -C /tmp/ab/$b; done
W=$(mktemp -d)
run() {  # name build timeout cmd...
  local n=$1 b=$2 t=$3; shift 3
  ( cd /tmp/ab/$b && OMP_NUM_THREADS=3 LD_LIBRARY_PATH=. timeout "$t" "$@" > "$W/$n.log" 2>&1; echo "== $n rc=$? $(tail -1 "$W/$n.log")" )
}
pids=()
for b in main gradgate bwdlat bwdall; do
  run verify-bwdq-$b $b 150 ./kda-verify --suite backward-quick --impl cuda-generic --seed 12 & pids+=($!)
done
run tests-bwdall bwdall 200 ./kda_gpu_tests --gtest_filter='*CudaChunkedBackward*:*CudaBackward*-Large/CudaBackward.*' & pids+=($!)
wait "${pids[@]}"
grep -hE 'FAIL|Failure' "$W"/*.log | head -20
strip_t() { sed 's/ *[0-9.]*s (oracle [0-9.]*s)$//; s/ *[0-9.]*s$//' "$1"; }
diff <(strip_t "$W/verify-bwdq-main.log") <(strip_t "$W/verify-bwdq-bwdlat.log") > "$W/diff-main-bwdlat.txt" && echo "bwdq figures identical: main vs bwdlat" || { echo "bwdq figures differ main vs bwdlat:"; head -12 "$W/diff-main-bwdlat.txt"; }
diff <(strip_t "$W/verify-bwdq-gradgate.log") <(strip_t "$W/verify-bwdq-bwdall.log") > "$W/diff-gradgate-bwdall.txt" && echo "bwdq figures identical: gradgate vs bwdall" || { echo "bwdq figures differ gradgate vs bwdall:"; head -12 "$W/diff-gradgate-bwdall.txt"; }
(cd "$W" && tar -cf "$OUT/checks.tar" .)
date -u
OUT=$OUT timeout 330 bash scripts/gpu_ab.sh --builds main,gradgate,bwdlat,bwdall --impl cuda-generic --rounds 2 \
  --workload train-h64-fixed
echo "gpu_ab backward rc=$?"
date -u
