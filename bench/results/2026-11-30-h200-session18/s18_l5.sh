#!/usr/bin/env bash
# Session 18, call 5 (~220 s, the session's last device seconds): stg2 (wg18 25abc31: stg with the final state
# stored in place from a row base and two strides; stg's staged store cost 36 bytes of spills in the state pass's
# loop, and stg measured h64-fixed +28 us and train-h64's backward +76 us against wgr / main) against main.
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l5.log") 2>&1
date -u
for b in main stg2; do mkdir -p /tmp/ab/$b && tar -xJf .carry/ab/$b.tar.xz -C /tmp/ab/$b; done
W=$(mktemp -d)
run() {  # name build timeout cmd...
  local n=$1 b=$2 t=$3; shift 3
  ( cd /tmp/ab/$b && OMP_NUM_THREADS=3 LD_LIBRARY_PATH=. timeout "$t" "$@" > "$W/$n.log" 2>&1; echo "== $n rc=$? $(tail -n 1 "$W/$n.log")" )
}
SF=14035002217949444255
pids=()
run verify-quick-stg2 stg2 55 ./kda-verify --suite quick --impl cuda-generic --seed $SF & pids+=($!)
run tests-stg2 stg2 55 ./kda_gpu_tests --gtest_filter='Own/CudaHopper.*:CudaBehaviour.*' & pids+=($!)
wait "${pids[@]}"
grep -hE "FAILED|Failure|FAIL " "$W"/*.log | head -20
(cd "$W" && tar -czf "$OUT/checks.tgz" .)
date -u
OUT=$OUT timeout 100 bash scripts/gpu_ab.sh --builds main,stg2 --impl cuda-generic --rounds 1 --workload train-h64-fixed
echo "gpu_ab train rc=$?"
date -u
OUT=$OUT timeout 60 bash scripts/gpu_ab.sh --builds main,stg2 --impl cuda-generic --rounds 1 \
  --workload h64-fixed --workload h64-uniform --workload h96-fixed --workload h96-uniform
echo "gpu_ab rc=$?"
date -u
