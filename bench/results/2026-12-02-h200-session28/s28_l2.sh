#!/usr/bin/env bash
# Session 28, call 2 (~500 s: run with timeout_s 595). Builds (.carry/ab): main (9615550: call 1's prodcs2 and
# tplanes merged), gradk (the gradient pass: dk's column-side pair terms summed into DK in shared memory instead of
# global scratch, so P6 / P7 read no scratch; dM / dA by cp.async issued first in P0: a new summation order for dk,
# judged by backward-full), gradk8 (gradk + P0's raw loads of all a warp's rows in one batch: gradk's figures
# expected). Then the A/B at train-h64-fixed (2 rounds), every backward launch of gradk / gradk8 under ncu, main's
# decode beside kda-bench's copy kernel of the same bytes (issue #7's per-size reference, never run before), and the
# gradient kernel of the faster of gradk / gradk8 under ncu --set full with source (to read by CUDA line here).
# Run as: OUT=$OUT bash .carry/lease/s28_l2.sh   carry [".carry/lease", ".carry/ab/main.tar.xz",
# ".carry/ab/gradk.tar.xz", ".carry/ab/gradk8.tar.xz"].
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l2
lease_unpack main gradk gradk8
pids=()
lease_same_figures backward-quick gradk gradk8 > "$W/same.txt" 2>&1 & pids+=($!)
lease_bwd_checks gradk
wait "${pids[@]}"
cat "$W/same.txt"
lease_checks_done
mkdir -p "$OUT/ab"
OUT=$OUT/ab timeout 215 bash scripts/gpu_ab.sh --builds main,gradk,gradk8 --impl cuda-generic --rounds 2 \
  --workload train-h64-fixed
echo "gpu_ab rc=$?"; date -u
for b in gradk gradk8; do lease_ncu_launches $b train-h64-fixed 'products_kernel|grad_kernel'; done
cp "$W"/ncu-*.txt "$OUT/" 2>/dev/null
(cd /tmp/ab/main && LD_LIBRARY_PATH=. timeout 100 ./kda-bench --commit main --impl cuda-generic --iters 100 \
  --workload decode-h32-b32 --workload decode-h12-b32 --workload decode-h32-b128 --workload decode-h32-b256 \
  --json "$OUT/dec-copyref.json" > "$OUT/dec-copyref.log" 2>&1)
grep -E "^[a-z0-9-]+:|median|copy" "$OUT/dec-copyref.log" | cut -c1-200
date -u
mkdir -p "$OUT/ncu"
OUT=$OUT/ncu timeout 60 bash scripts/gpu_ab.sh --builds gradk8 --impl cuda-generic --rounds 0 --ncu grad_kernel \
  --ncu-count 1 --workload train-h64-fixed
echo "ncu rc=$?"; date -u
