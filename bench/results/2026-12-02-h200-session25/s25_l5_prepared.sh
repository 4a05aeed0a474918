#!/usr/bin/env bash
# Session 25's fifth device call (~200 s, the budget's last). Which of lat's changes (call 4: +190 us with main's
# bits) costs: latb (c1e82d4: P5b's beta logits and P7's dk from shared memory) and latp (eed9518: pblk in
# registers). backward-quick at one fresh seed on main and latb (the same figures expected), then train-h64-fixed:
# main, latb, latp one round, main, latb a second.
# Run as: OUT=$OUT bash .carry/lease/s25_l5.sh   with carry [".carry/lease", ".carry/ab"].
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l5
lease_unpack main latb latp
lease_same_figures backward-quick main latb
lease_checks_done
mkdir -p "$OUT/ab" "$OUT/ab2"
OUT=$OUT/ab timeout 110 bash scripts/gpu_ab.sh --builds main,latb,latp --impl cuda-generic --rounds 1 \
  --workload train-h64-fixed
echo "gpu_ab rc=$?"; date -u
OUT=$OUT/ab2 timeout 75 bash scripts/gpu_ab.sh --builds latb,main --impl cuda-generic --rounds 1 \
  --workload train-h64-fixed
echo "gpu_ab rc=$?"; date -u
