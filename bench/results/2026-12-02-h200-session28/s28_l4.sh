#!/usr/bin/env bash
# Session 28, call 4 (~110 s; the budget's last ~260 s): train-h96-fixed, one round, prodcs2 (eee5b2c: call 1's
# products change alone, the backward as it was before call 2's gradk) against main (f19f2e6: prodcs2 + tplanes +
# gradk): does the gradient pass's gain hold at 96 heads?
# Run as: OUT=$OUT bash .carry/lease/s28_l4.sh   carry [".carry/lease", ".carry/ab/main.tar.xz",
# ".carry/ab/prodcs2.tar.xz"].
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l4
mkdir -p "$OUT/ab"
OUT=$OUT/ab timeout 150 bash scripts/gpu_ab.sh --builds prodcs2,main --impl cuda-generic --rounds 1 \
  --workload train-h96-fixed
echo "gpu_ab rc=$?"; date -u
