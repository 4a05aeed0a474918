#!/usr/bin/env bash
# Session 27, call 2 (~480 s): issue #9's products kernel. Builds (.carry/ab): main = 92c7bba (main's backward
# kernels), prodpl = main + block_gemm reading operands that arrive as bf16 planes where they lie (dO' split once when
# staged, dW once in its epilogue, W's phase-1 planes straight to ldmatrix: the same values, so main's bits expected),
# prodsol = prodpl + S0, dS_end, V_new and dU read as planes from their fp32 buffers (WRONG values: the speed of light
# of having their writers store planes; timed only). First the A/B at train-h64-fixed (2 rounds); then backward-quick
# on main and prodpl at one fresh seed (the same figures expected) beside prodpl's backward / stress GPU tests and
# backward-full; then the products kernel of prodpl and prodsol under ncu.
# Run as: OUT=$OUT bash .carry/lease/s27_l2.sh   with carry [".carry/lease", ".carry/ab/main.tar.xz",
# ".carry/ab/prodpl.tar.xz", ".carry/ab/prodsol.tar.xz"].
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l2
lease_unpack main prodpl prodsol
mkdir -p "$OUT/ab"
OUT=$OUT/ab timeout 230 bash scripts/gpu_ab.sh --builds main,prodpl,prodsol --impl cuda-generic --rounds 2 \
  --workload train-h64-fixed
echo "gpu_ab rc=$?"; date -u
lease_same_figures backward-quick main prodpl & sp=$!
lease_bwd_checks prodpl
wait $sp
lease_checks_done
for b in prodpl prodsol main; do lease_ncu $b train-h64-fixed products_kernel; done
cp "$W"/ncu-*.txt "$OUT/" 2>/dev/null
date -u
