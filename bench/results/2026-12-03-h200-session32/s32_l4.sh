#!/usr/bin/env bash
# Session 32, call 4 (~480 s; run with timeout_s 590): s5cwarp, phase 1's S5c row copies issued by one lane of
# every warp with warp-uniform operands (no loop over the lanes around each bulk copy: session 28's ncu put the
# tail at ~10% of the kernel's stall samples). Builds: main = 9657eae, s5cwarp = main + the change. The same bytes
# copied, so: kda-verify --suite full and backward-quick (bf16 gradients) on both builds at one fresh seed each,
# figures compared row for row; s5cwarp's forward GPU tests. Then the A/B (2 rounds: h64-fixed, h96-fixed,
# train-h64-fixed), the prepare launches under ncu at h64-fixed, s5cwarp's six standard prefill workloads.
# Run as: OUT=$OUT bash .carry/lease/s32_l4.sh
#   carry [".carry/lease", ".carry/ab/main.tar.xz", ".carry/ab/s5cwarp.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l4
lease_unpack main s5cwarp
mkdir -p "$OUT/ab" "$OUT/six"
SF=$(od -An -N8 -tu8 /dev/urandom | tr -d " ")
SB=$(od -An -N8 -tu8 /dev/urandom | tr -d " ")
echo "seeds: full $SF, backward-quick $SB"
pids=()
for b in main s5cwarp; do
  lease_run full-$b $b 6 200 ./kda-verify --suite full --impl cuda-generic --seed $SF & pids+=($!)
  lease_run bq-$b $b 2 200 ./kda-verify --suite backward-quick --input-dtype-grads --impl cuda-generic --seed $SB &
  pids+=($!)
done
lease_run tests s5cwarp 2 220 ./kda_gpu_tests --gtest_filter='*Chunk*:*Forward*:*Stress*:*Hopper*' & pids+=($!)
wait "${pids[@]}"
for s in full bq; do
  for b in main s5cwarp; do lease_passed $s-$b && echo "$b: $s passed" || echo "$b: $s FAILED"; done
  diff <(grep -E " PASS | FAIL " "$W/$s-main.log" | cut -c1-120) <(grep -E " PASS | FAIL " "$W/$s-s5cwarp.log" |
    cut -c1-120) > /dev/null && echo "s5cwarp: $s the same figures as main" || echo "s5cwarp: $s figures DIFFER"
done
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/tests.log" | head -20
lease_checks_done
date -u
OUT=$OUT/ab timeout 200 bash scripts/gpu_ab.sh --builds main,s5cwarp --impl cuda-generic --rounds 2 \
  --workload h64-fixed --workload h96-fixed --workload train-h64-fixed
echo "gpu_ab rc=$?"; date -u
for b in main s5cwarp; do lease_ncu_launches $b h64-fixed 'prepare'; done
cp "$W"/ncu-*.txt "$OUT/" 2>/dev/null
(cd /tmp/ab/s5cwarp && for wl in h96-fixed h96-mixed h96-uniform h64-fixed h64-mixed h64-uniform; do
  LD_LIBRARY_PATH=. timeout 45 ./kda-bench --impl cuda-generic --iters 100 --workload $wl --json "$OUT/six/$wl.json" |
    grep -E "median|WRONG|ERROR"
done)
date -u
