#!/usr/bin/env bash
# Session 29, call 3 (~500 s; run with timeout_s 590): prepspec, phase 1 (the prepare kernel of the forward and of the
# backward's recompute) built per input dtype and gate mode as the gradient pass now is (IoSpec): static SASS of the
# bf16 / bounded instance 6896 -> 6120. Builds: main = 109693b's binaries (gradspec landed; main's later commits
# change tests only), prepspec = main + the change. The same operations in the same order, so: kda-verify --suite
# full (forward) and backward-quick with bf16 gradients on both builds at one fresh seed each, figures compared row
# for row; prepspec's forward GPU tests. Order: the A/B at train-h64-fixed (its forward and backward, 2 rounds), the
# checks, the prepare launches under ncu, prepspec's six standard prefill workloads, train-h96-fixed (1 round).
# Run as: OUT=$OUT bash .carry/lease/s29_l3.sh   carry [".carry/lease", ".carry/ab/main.tar.xz", ".carry/ab/prepspec.tar.xz"].
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l3
lease_unpack main prepspec
mkdir -p "$OUT/ab" "$OUT/ab96" "$OUT/six"
OUT=$OUT/ab timeout 150 bash scripts/gpu_ab.sh --builds main,prepspec --impl cuda-generic --rounds 2 \
  --workload train-h64-fixed
echo "gpu_ab rc=$?"; date -u
SF=$(od -An -N8 -tu8 /dev/urandom | tr -d " ")
SB=$(od -An -N8 -tu8 /dev/urandom | tr -d " ")
echo "seeds: full $SF, backward-quick $SB"
pids=()
for b in main prepspec; do
  lease_run full-$b $b 6 200 ./kda-verify --suite full --impl cuda-generic --seed $SF & pids+=($!)
  lease_run bq-$b $b 2 200 ./kda-verify --suite backward-quick --input-dtype-grads --impl cuda-generic --seed $SB &
  pids+=($!)
done
lease_run tests prepspec 2 220 ./kda_gpu_tests --gtest_filter='*Chunk*:*Forward*:*Stress*' & pids+=($!)
wait "${pids[@]}"
for s in full bq; do
  for b in main prepspec; do lease_passed $s-$b && echo "$b: $s passed" || echo "$b: $s FAILED"; done
  diff <(grep -E " PASS | FAIL " "$W/$s-main.log" | cut -c1-120) <(grep -E " PASS | FAIL " "$W/$s-prepspec.log" |
    cut -c1-120) > /dev/null && echo "prepspec: $s the same figures as main" || echo "prepspec: $s figures DIFFER"
done
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/tests.log" | head -20
lease_checks_done
for b in main prepspec; do lease_ncu_launches $b train-h64-fixed 'prepare'; done
cp "$W"/ncu-*.txt "$OUT/" 2>/dev/null
(cd /tmp/ab/prepspec && for wl in h96-fixed h96-mixed h96-uniform h64-fixed h64-mixed h64-uniform; do
  LD_LIBRARY_PATH=. timeout 45 ./kda-bench --impl cuda-generic --iters 100 --workload $wl --json "$OUT/six/$wl.json" |
    grep -E "median|WRONG|ERROR"
done)
date -u
OUT=$OUT/ab96 timeout 120 bash scripts/gpu_ab.sh --builds main,prepspec --impl cuda-generic --rounds 1 \
  --workload train-h96-fixed
echo "gpu_ab rc=$?"; date -u
