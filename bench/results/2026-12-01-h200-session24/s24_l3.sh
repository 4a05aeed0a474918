#!/usr/bin/env bash
# Session 24's third device call (~420 s). p4r (779d39c: the gradient pass's diagonal-block row loop rolled, a_r one
# row ahead; the same operations in the same order as main) and ka16 (c06bc18, on p4r: the product-row rings 16 rows
# ahead): backward-quick at one fresh seed on main, p4r and ka16 (the same figures expected: the same bits), then on
# ka16 backward-full whole and the backward GPU tests; then the A/B main, p4r, ka16 on train-h64-fixed (2 rounds).
# Run as: OUT=$OUT bash .carry/lease/s24_l3.sh   with carry [".carry/lease", ".carry/ab"].
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l3
lease_unpack main p4r ka16
S=(--seed "$(od -An -N8 -tu8 /dev/urandom | tr -d " ")")  # fresh, one for all three builds
echo "backward-quick seed: ${S[1]}"
pids=()
for b in main p4r ka16; do
  lease_run bwdq-$b $b 1 200 ./kda-verify --impl cuda-generic --suite backward-quick "${S[@]}" & pids+=($!)
done
lease_run tests ka16 2 220 ./kda_gpu_tests --gtest_filter='*Backward*:*Stress*' & pids+=($!)
lease_bwd_full ka16 & pids+=($!)
wait "${pids[@]}"  # never a bare wait (the tee above)
for n in bwdq-main bwdq-p4r bwdq-ka16 bwdfull-a bwdfull-b bwdfull-c bwdfull-d; do
  lease_passed $n && echo "$n passed" || echo "$n FAILED"
done
for b in p4r ka16; do
  diff <(grep -E "^bwd_" "$W/bwdq-main.log" | cut -c1-120) <(grep -E "^bwd_" "$W/bwdq-$b.log" | cut -c1-120) \
    > /dev/null && echo "backward-quick figures: $b = main" || echo "backward-quick figures: $b DIFFER from main"
done
grep -hE "^bwd_" "$W"/bwdfull-*.log | cut -c1-160
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W"/tests.log | head -20
lease_checks_done
mkdir -p "$OUT/ab"
OUT=$OUT/ab timeout 260 bash scripts/gpu_ab.sh --builds main,p4r,ka16 --impl cuda-generic --rounds 2 \
  --workload train-h64-fixed
echo "gpu_ab rc=$?"; date -u
