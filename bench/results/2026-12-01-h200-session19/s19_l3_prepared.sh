#!/usr/bin/env bash
# Prepared in session 18 for session 19 (~360 s): dtail (branch dtail, 0893af5 = main 3a8f7ec's code + this) against
# main: the sm_90 bulk decode kernel with the last, partial round of units dealt in smaller units (bulk::make_plan;
# docs/decode.md). Predicted: H32 B32 -8%, B128 -4%, B256 -1%; H12 B128 and B512-like whole rounds unchanged (the
# plan takes no tail there); the bf16 pool at B32 about as fp32's. Checks: the decode GPU tests and decode-full on
# dtail (the plan changes which CTA takes which tile, never a value: the verifier's lines must equal main's).
# Run as: OUT=$OUT bash .carry/lease/s19_l3_prepared.sh   with carry [".carry/lease", ".carry/ab"].
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l3.log") 2>&1
date -u
for b in main dtail; do mkdir -p /tmp/ab/$b && tar -xJf .carry/ab/$b.tar.xz -C /tmp/ab/$b; done
W=$(mktemp -d)
run() {  # name build timeout cmd...
  local n=$1 b=$2 t=$3; shift 3
  ( cd /tmp/ab/$b && OMP_NUM_THREADS=3 LD_LIBRARY_PATH=. timeout "$t" "$@" > "$W/$n.log" 2>&1; echo "== $n rc=$? $(tail -n 1 "$W/$n.log")" )
}
SD=9007199254740993
pids=()
run verify-decode-dtail dtail 90 ./kda-verify --suite decode-full --impl cuda-generic --seed $SD & pids+=($!)
run verify-decode-main main 90 ./kda-verify --suite decode-full --impl cuda-generic --seed $SD & pids+=($!)
run tests-dtail dtail 90 ./kda_gpu_tests --gtest_filter='*Decode*' & pids+=($!)
wait "${pids[@]}"
grep -hE "FAILED|Failure|FAIL " "$W"/*.log | head -20
diff <(grep -E "PASS|FAIL" "$W/verify-decode-main.log" | awk '{NF--; print}') \
  <(grep -E "PASS|FAIL" "$W/verify-decode-dtail.log" | awk '{NF--; print}') > /dev/null && echo "decode-full lines equal"
(cd "$W" && tar -czf "$OUT/checks.tgz" .)
date -u
OUT=$OUT timeout 150 bash scripts/gpu_ab.sh --builds main,dtail --impl cuda-generic --rounds 3 \
  --workload decode-h32-b32 --workload decode-h32-b128 --workload decode-h32-b256 --workload decode-h12-b128 \
  --workload decode-h32-b32-bf16
echo "gpu_ab rc=$?"
date -u
# The backward's products kernel (2.81 ms of train-h64's 13 ms), full set with source, for its next design (pp, its
# double-buffered staging, measured +299 us in session 18 without a profile to say why).
OUT=$OUT timeout 100 bash scripts/gpu_ab.sh --builds main --impl cuda-generic --rounds 0 --ncu products_kernel \
  --ncu-count 1 --workload train-h64-fixed
echo "gpu_ab ncu rc=$?"
date -u
# What holds the bulk kernel's steady rate at 87% of the copy rate (#7 asks 90%): full ncu with source at B256.
OUT=$OUT timeout 90 bash scripts/gpu_ab.sh --builds main --impl cuda-generic --rounds 0 --ncu decode_bulk_kernel \
  --ncu-count 1 --workload decode-h32-b256
echo "gpu_ab ncu rc=$?"
date -u
