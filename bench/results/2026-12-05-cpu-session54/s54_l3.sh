#!/usr/bin/env bash
# Session 54, call 2 (a short budget): phase 1's by-line ncu profile (full set with source) on p1loops, the build that
# landed (a27c5ac's kernels), at h64-fixed: where the next step of issue #6 should go. ~150 s + start.
# Run as: OUT=$OUT bash .carry/lease/s54_l3.sh   carry [".carry/lease", ".carry/ab/p1loops.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s54_l3
lease_unpack p1loops
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lease_ncu_launches p1loops h64-fixed prepare
mkdir -p "$OUT/ncu"
OUT=$OUT/ncu timeout 170 bash scripts/gpu_ab.sh --builds p1loops --rounds 0 --ncu prepare_kernel --ncu-count 1 \
  --workload h64-fixed > "$OUT/ncu/gpu_ab.log" 2>&1
echo "== ncu prepare rc=$?"
tail -5 "$OUT/ncu/gpu_ab.log"
date -u
