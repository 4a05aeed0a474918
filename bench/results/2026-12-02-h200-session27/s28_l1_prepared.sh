#!/usr/bin/env bash
# Prepared in session 27 for the next session's first device call (~540 s: run it with timeout_s 590), not yet run.
# Builds (.carry/ab): main = 507f64d (9de1ade's kernels; kda-bench with the copy-kernel reference), tplanes = main + T
# saved as bf16 planes by phase 1 (zeros above its diagonal) so P2's GEMMs split nothing (the same values in the same
# order: main's backward-quick figures expected), prodcs2 = main + the products' CS on all 256 threads with 16-byte
# plane loads (a different summation order: new figures, judged by backward-full). Checks: backward-quick main / tplanes
# at one fresh seed (lease_same_figures), then prodcs2's and tplanes' backward / stress GPU tests and backward-full
# (tplanes' GPU tests beside prodcs2's checks); then the A/B at train-h64-fixed (2 rounds) and every backward launch of
# one step of all three under ncu (session 27: products 2.34 ms on main, 2.10 in the speed-of-light build). Also main's
# decode against the new copy-kernel reference (~40 s).
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
# Issue #7's per-size copy reference (kda-bench's copy kernel, new at main): main's decode beside a plain copy
# kernel and the driver's copy of the same bytes in the same graph harness.
(cd /tmp/ab/main && LD_LIBRARY_PATH=. timeout 100 ./kda-bench --commit main --impl cuda-generic --iters 100 \
  --workload decode-h32-b32 --workload decode-h12-b32 --workload decode-h32-b128 --workload decode-h32-b256 \
  --json "$OUT/dec-copyref.json" > "$OUT/dec-copyref.log" 2>&1)
grep -E "median|copy" "$OUT/dec-copyref.log"
date -u
