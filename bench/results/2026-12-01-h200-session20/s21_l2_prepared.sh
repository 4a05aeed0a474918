#!/usr/bin/env bash
# Prepared in session 20 for session 21's second device call (~200 s): wc's training A/B (the 3xTF32 branch staged;
# predicted train-h64 backward -20..-60 us) and ncu with source of s2p's prepare kernel (what holds it after the
# MUFU cut). Run as: OUT=$OUT bash .carry/lease/s21_l2_prepared.sh   with carry [".carry/lease", ".carry/ab"].
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l2.log") 2>&1
date -u
source scripts/lease_lib.sh
lease_unpack wus wc s2p
OUT=$OUT timeout 80 bash scripts/gpu_ab.sh --builds wus,wc --impl cuda-generic --rounds 1 --workload train-h64-fixed
echo "gpu_ab train rc=$?"
date -u
mkdir -p "$OUT/ncu-s2p"
OUT=$OUT/ncu-s2p timeout 60 bash scripts/gpu_ab.sh --builds s2p --impl cuda-generic --rounds 0 --ncu prepare_kernel \
  --ncu-count 1 --workload h64-fixed
echo "gpu_ab ncu rc=$?"
date -u
