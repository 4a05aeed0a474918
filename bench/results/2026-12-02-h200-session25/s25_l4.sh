#!/usr/bin/env bash
# Session 25's fourth device call (~300 s). lat (98cfa3c: the gradient pass's P5b beta logits and P7's dk from shared
# memory, pblk in registers) and lat2 (8c79448: lat + the products kernel's CS loads behind dO's), both meant to keep
# main's bits: backward-quick at one fresh seed on main, lat, lat2 (the same figures expected), then the A/B main, lat,
# lat2 on train-h64-fixed (2 rounds) and train-h96-fixed (1 round).
# Run as: OUT=$OUT bash .carry/lease/s25_l4.sh   with carry [".carry/lease", ".carry/ab"].
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l4
lease_unpack main lat lat2
lease_same_figures backward-quick main lat lat2
lease_checks_done
mkdir -p "$OUT/ab" "$OUT/ab96"
OUT=$OUT/ab timeout 240 bash scripts/gpu_ab.sh --builds main,lat,lat2 --impl cuda-generic --rounds 2 \
  --workload train-h64-fixed
echo "gpu_ab rc=$?"; date -u
OUT=$OUT/ab96 timeout 150 bash scripts/gpu_ab.sh --builds main,lat2 --impl cuda-generic --rounds 1 \
  --workload train-h96-fixed
echo "gpu_ab rc=$?"; date -u
