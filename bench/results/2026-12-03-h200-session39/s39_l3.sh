#!/usr/bin/env bash
# Session 39, call 3 (~480 s): pse (pf, now main, plus pass S's first slice issued in pass V's last step) checked and
# timed against pf; then where the step's time goes now: every launch of one train-h64-fixed step under ncu (pf), and
# the products (pf) and grad_tc kernels by source line.
# Run as: OUT=$OUT bash .carry/lease/s39_l3.sh
#   carry [".carry/lease", ".carry/ab/pf.tar.xz", ".carry/ab/pse.tar.xz", ".carry/ab/pf.COMMIT", ".carry/ab/pse.COMMIT"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l3
lease_unpack pf pse
pids=()
lease_run tests pse 4 200 ./kda_gpu_tests --gtest_filter='*Wgmma*:*Backward*:*Stress*' & pids+=($!)
lease_bwd_full pse & pids+=($!)
wait "${pids[@]}"
for n in bwdfull-a bwdfull-b bwdfull-c bwdfull-d; do
  lease_passed $n && echo "pse: $n passed" || echo "pse: $n FAILED"
done
grep -hE "^bwd_" "$W"/bwdfull-*.log | cut -c1-160
grep -hE "^\[  (FAILED|PASSED) |tests? ran|products P1" "$W/tests.log" | head -20
lease_checks_done
lease_ab pf,pse 230 train-h64-fixed
lease_ncu_launches pf train-h64-fixed '.'
cp "$W/ncu-launches-pf-train-h64-fixed.txt" "$OUT/"
mkdir -p "$OUT/prof"
OUT=$OUT/prof timeout 100 bash scripts/gpu_ab.sh --builds pf --rounds 0 --ncu 'products_kernel|grad_tc_kernel' \
  --ncu-count 2 --workload train-h64-fixed
echo "gpu_ab ncu rc=$?"
date -u
