#!/usr/bin/env bash
# Prepared in session 27 for the next session's first device call (~470 s), not yet run. Builds (.carry/ab): main =
# de36b4d (9de1ade's kernels and a comment), tplanes = main + T saved as bf16 planes by phase 1 (zeros above its
# diagonal) so P2's GEMMs split nothing (the same values in the same order: main's backward-quick figures expected),
# prodcs2 = main + the products' CS on all 256 threads with 16-byte plane loads (a different summation order: new
# figures, judged by backward-full). Checks: backward-quick main / tplanes at one fresh seed (lease_same_figures), then
# prodcs2's and tplanes' backward / stress GPU tests and backward-full (tplanes' GPU tests beside prodcs2's checks);
# then the A/B at train-h64-fixed (2 rounds) and every backward launch of one step of all three under ncu (session 27:
# products 2.34 ms on main, 2.10 in the speed-of-light build).
# Run as: OUT=$OUT bash .carry/lease/s28_l1.sh   with carry [".carry/lease", ".carry/ab/main.tar.xz",
# ".carry/ab/tplanes.tar.xz", ".carry/ab/prodcs2.tar.xz"].
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l1
lease_unpack main tplanes prodcs2
lease_same_figures backward-quick main tplanes
pids=()
lease_run tests-tplanes tplanes 2 220 ./kda_gpu_tests --gtest_filter='*Backward*:*Stress*' & pids+=($!)
lease_bwd_checks prodcs2
wait "${pids[@]}"
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W"/tests-tplanes.log | head
lease_checks_done
mkdir -p "$OUT/ab"
OUT=$OUT/ab timeout 220 bash scripts/gpu_ab.sh --builds main,tplanes,prodcs2 --impl cuda-generic --rounds 2 \
  --workload train-h64-fixed
echo "gpu_ab rc=$?"; date -u
for b in main tplanes prodcs2; do
  lease_ncu_launches $b train-h64-fixed 'prepare|state_wgmma|reverse|products_kernel|grad_kernel'
done
cp "$W"/ncu-*.txt "$OUT/" 2>/dev/null
date -u
