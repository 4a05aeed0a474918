#!/usr/bin/env bash
# Session 26, call 3 (~500 s, the session's last): issue #9's products kernel. Builds (.carry/ab): main = a8b8b63
# (6922370's kernels), prodring = 3919f01 (block_gemm's global operands through a 4-slice cp.async ring in shared
# memory, 3 slices ahead, instead of registers one slice ahead; the same values split and multiplied in the same
# order, so the same bits). First the A/B at train-h64-fixed (2 rounds); then, in parallel, backward-quick on main and
# prodring at one fresh seed (the same figures expected: lease_same_figures) and prodring's backward / stress GPU
# tests and backward-full whole (lease_bwd_checks); then the products kernel of both under ncu (summary sections).
# Run as: OUT=$OUT bash .carry/lease/s26_l3.sh   with carry [".carry/lease", ".carry/ab/main.tar.xz",
# ".carry/ab/prodring.tar.xz"].
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l3
lease_unpack main prodring
mkdir -p "$OUT/ab"
OUT=$OUT/ab timeout 170 bash scripts/gpu_ab.sh --builds main,prodring --impl cuda-generic --rounds 2 \
  --workload train-h64-fixed
echo "gpu_ab rc=$?"; date -u
grep -hE "^== |backward median" "$OUT"/ab/*.log 2>/dev/null | head; tar -xOf "$OUT/ab/results.tar" --wildcards \
  '*.log' 2>/dev/null | grep -E "backward median" | head
lease_same_figures backward-quick main prodring & sp=$!
lease_bwd_checks prodring
wait $sp
lease_checks_done
for b in prodring main; do lease_ncu $b train-h64-fixed products_kernel; done
cp "$W"/ncu-*.txt "$OUT/" 2>/dev/null
date -u
