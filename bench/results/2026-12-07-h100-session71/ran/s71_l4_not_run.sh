#!/usr/bin/env bash
# Session 71's third call, on the budget's rest: lead2 (branch: the gradient pipe's lead half the resident clusters,
# so stages mix in from the first wave) against dsmx (= main cdce90a's kernels), train-h64-fixed, one round.
# Run as OUT=$OUT bash .carry/lease/s71_l4.sh, timeout_s 200, carry [".carry/lease", ".carry/ab"].
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s71_l4
lease_unpack dsmx lead2
mkdir -p "$OUT/ab"
OUT=$OUT/ab timeout $((${LIMIT:-170} - SECONDS)) bash scripts/gpu_ab.sh --builds dsmx,lead2 --impl cuda-generic --rounds 1 \
  --workload train-h64-fixed
echo "gpu_ab rc=$? done at $SECONDS s"
