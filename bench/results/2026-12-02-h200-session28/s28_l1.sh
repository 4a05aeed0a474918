#!/usr/bin/env bash
# Session 28, call 1 (~560 s: run with timeout_s 595). Builds (.carry/ab): main (b5b133e: 9de1ade's kernels), tplanes
# (T saved as bf16 planes by phase 1, zeros above its diagonal: P2 splits nothing; main's figures expected), prodcs2
# (the products' CS on all 256 threads with 16-byte plane loads: new summation order, judged by backward-full).
# Checks: backward-quick main / tplanes at one fresh seed, tplanes' backward / stress GPU tests beside prodcs2's
# lease_bwd_checks; A/B train-h64-fixed (2 rounds); every backward launch of one step under ncu (durations); then the
# forward's phase 1 (prepare) of main at h64-fixed under ncu --set full with source (not profiled by line since
# session 12), to read by CUDA line here.
# Run as: OUT=$OUT bash .carry/lease/s28_l1.sh   carry [".carry/lease", ".carry/ab/main.tar.xz",
# ".carry/ab/tplanes.tar.xz", ".carry/ab/prodcs2.tar.xz"].
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt" 2>&1
lease_unpack main tplanes prodcs2
lease_same_figures backward-quick main tplanes
pids=()
lease_run tests-tplanes tplanes 2 220 ./kda_gpu_tests --gtest_filter='*Backward*:*Stress*' & pids+=($!)
lease_bwd_checks prodcs2
wait "${pids[@]}"
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W"/tests-tplanes.log | head
lease_checks_done
mkdir -p "$OUT/ab"
OUT=$OUT/ab timeout 200 bash scripts/gpu_ab.sh --builds main,tplanes,prodcs2 --impl cuda-generic --rounds 2 \
  --workload train-h64-fixed
echo "gpu_ab rc=$?"; date -u
for b in main tplanes prodcs2; do
  lease_ncu_launches $b train-h64-fixed 'prepare|state_wgmma|reverse|products_kernel|grad_kernel'
done
cp "$W"/ncu-*.txt "$OUT/" 2>/dev/null
date -u
mkdir -p "$OUT/prep"
OUT=$OUT/prep timeout 120 bash scripts/gpu_ab.sh --builds main --impl cuda-generic --rounds 0 --ncu prepare \
  --ncu-count 1 --workload h64-fixed
echo "ncu prepare rc=$?"; date -u
