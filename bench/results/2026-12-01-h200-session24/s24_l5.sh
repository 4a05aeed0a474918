#!/usr/bin/env bash
# Session 24's fifth device call (~200 s, the budget's last). ar (6922370: main + the block pairs' a_r one row ahead,
# rings at 8 rows as main): backward-quick at one fresh seed on main and ar (the same figures expected: the same
# operations in the same order), then the A/B main, ar on train-h64-fixed (2 rounds).
# Run as: OUT=$OUT bash .carry/lease/s24_l5.sh   with carry [".carry/lease", ".carry/ab"].
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l5
lease_unpack main ar
S=(--seed "$(od -An -N8 -tu8 /dev/urandom | tr -d " ")")  # fresh, one for both builds
echo "backward-quick seed: ${S[1]}"
pids=()
for b in main ar; do
  lease_run bwdq-$b $b 2 120 ./kda-verify --impl cuda-generic --suite backward-quick "${S[@]}" & pids+=($!)
done
wait "${pids[@]}"  # never a bare wait (the tee above)
for n in bwdq-main bwdq-ar; do lease_passed $n && echo "$n passed" || echo "$n FAILED"; done
diff <(grep -E "^bwd_" "$W/bwdq-main.log" | cut -c1-120) <(grep -E "^bwd_" "$W/bwdq-ar.log" | cut -c1-120) \
  > /dev/null && echo "backward-quick figures: ar = main" || echo "backward-quick figures: ar DIFFER from main"
lease_checks_done
mkdir -p "$OUT/ab"
OUT=$OUT/ab timeout 150 bash scripts/gpu_ab.sh --builds main,ar --impl cuda-generic --rounds 2 \
  --workload train-h64-fixed
echo "gpu_ab rc=$?"; date -u
