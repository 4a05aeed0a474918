#!/usr/bin/env bash
# Session 32, call 7 (the session's last ~300 s of device time; run with timeout_s ~250): rows8, the row-split decode
# kernel with 8 state rows a warp at K <= 128 (main: 4), the dispatcher's limit the same in rows. Builds: main =
# 32a25f5, rows8 = main + the change (96 registers at K = 128, one token; 5 CTAs an SM instead of 6, half the warps).
# Each row's arithmetic is unchanged, so: kda-verify --suite decode-full on both at one fresh seed, figures compared
# row for row; rows8's decode GPU tests. Then the A/B (2 rounds) on the batches the row-split kernel takes (H32 B1 /
# B8, H12 B1 / B8 / B32) and one the bulk kernel takes (H32 B32, a control).
# Run as: OUT=$OUT bash .carry/lease/s32_l7.sh
#   carry [".carry/lease", ".carry/ab/main.tar.xz", ".carry/ab/rows8.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l7
lease_unpack main rows8
mkdir -p "$OUT/ab"
SD=$(od -An -N8 -tu8 /dev/urandom | tr -d " ")
echo "seed: decode-full $SD"
pids=()
for b in main rows8; do
  lease_run dfull-$b $b 6 120 ./kda-verify --suite decode-full --impl cuda-generic --seed $SD & pids+=($!)
done
lease_run tests rows8 2 120 ./kda_gpu_tests --gtest_filter='*Decode*' & pids+=($!)
wait "${pids[@]}"
for b in main rows8; do lease_passed dfull-$b && echo "$b: decode-full passed" || echo "$b: decode-full FAILED"; done
diff <(grep -E " PASS | FAIL " "$W/dfull-main.log" | cut -c1-120) <(grep -E " PASS | FAIL " "$W/dfull-rows8.log" |
  cut -c1-120) > /dev/null && echo "rows8: decode-full the same figures as main" || echo "rows8: figures DIFFER"
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/tests.log" | head -10
lease_checks_done
date -u
OUT=$OUT/ab timeout 110 bash scripts/gpu_ab.sh --builds main,rows8 --impl cuda-generic --rounds 2 \
  --workload decode-h32-b1 --workload decode-h32-b8 --workload decode-h12-b1 --workload decode-h12-b8 \
  --workload decode-h12-b32 --workload decode-h32-b32
echo "gpu_ab rc=$?"; date -u
