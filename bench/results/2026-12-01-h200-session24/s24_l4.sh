#!/usr/bin/env bash
# Session 24's fourth device call (~540 s). ka (a1d64c7: main + the gradient pass's product-row rings 16 rows ahead)
# and kaar (397702a: ka + the block pairs' a_r one row ahead); both keep main's operations in their order.
# backward-quick at one fresh seed on main, ka and kaar (the same figures expected), backward-full whole and the
# backward GPU tests on kaar; then the A/B main, ka, kaar on train-h64-fixed (2 rounds) and train-h96-fixed (1).
# Run as: OUT=$OUT bash .carry/lease/s24_l4.sh   with carry [".carry/lease", ".carry/ab"].
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l4
lease_unpack main ka kaar
S=(--seed "$(od -An -N8 -tu8 /dev/urandom | tr -d " ")")  # fresh, one for all three builds
echo "backward-quick seed: ${S[1]}"
pids=()
for b in main ka kaar; do
  lease_run bwdq-$b $b 1 200 ./kda-verify --impl cuda-generic --suite backward-quick "${S[@]}" & pids+=($!)
done
lease_run tests kaar 2 220 ./kda_gpu_tests --gtest_filter='*Backward*:*Stress*' & pids+=($!)
lease_bwd_full kaar & pids+=($!)
wait "${pids[@]}"  # never a bare wait (the tee above)
for n in bwdq-main bwdq-ka bwdq-kaar bwdfull-a bwdfull-b bwdfull-c bwdfull-d; do
  lease_passed $n && echo "$n passed" || echo "$n FAILED"
done
for b in ka kaar; do
  diff <(grep -E "^bwd_" "$W/bwdq-main.log" | cut -c1-120) <(grep -E "^bwd_" "$W/bwdq-$b.log" | cut -c1-120) \
    > /dev/null && echo "backward-quick figures: $b = main" || echo "backward-quick figures: $b DIFFER from main"
done
grep -hE "^bwd_" "$W"/bwdfull-*.log | cut -c1-160
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W"/tests.log | head -20
lease_checks_done
mkdir -p "$OUT/ab64" "$OUT/ab96"
OUT=$OUT/ab64 timeout 240 bash scripts/gpu_ab.sh --builds main,ka,kaar --impl cuda-generic --rounds 2 \
  --workload train-h64-fixed
echo "gpu_ab h64 rc=$?"; date -u
OUT=$OUT/ab96 timeout 180 bash scripts/gpu_ab.sh --builds main,ka,kaar --impl cuda-generic --rounds 1 \
  --workload train-h96-fixed
echo "gpu_ab h96 rc=$?"; date -u
