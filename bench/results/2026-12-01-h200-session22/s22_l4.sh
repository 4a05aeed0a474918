#!/usr/bin/env bash
# Session 22's fourth device call (~200 s): profiles of main (m22b, 7fad668) to plan issue #9's next step, no new
# build. Its kernels in one training step at train-h64-fixed (ncu SpeedOfLight + Occupancy: each kernel's duration,
# the backward's breakdown after rec / recsave / revov), then the products and gradient kernels with the full set and
# source (read here by CUDA line: scripts/ncu_stages.py --sass).
# Run as: OUT=$OUT bash .carry/lease/s22_l4.sh   with carry [".carry/lease", ".carry/ab/m22b.tar.xz"].
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l4
lease_unpack m22b
(cd /tmp/ab/m22b && LD_LIBRARY_PATH=. timeout 120 ncu --clock-control none --section SpeedOfLight --section Occupancy \
  --section LaunchStats -k "regex:prepare|state|reverse|products|grad|gate|finalize" -c 16 ./kda-bench \
  --workload train-h64-fixed --impl cuda-generic --no-verify --iters 1 --warmup 0 > "$OUT/ncu-train.txt" 2>&1
  echo "ncu train rc=$?")
grep -E "^  [a-zA-Z_ :<>,0-9]*\(|Duration|Registers Per|Achieved Occ" "$OUT/ncu-train.txt" | cut -c1-120 | head -80
date -u
mkdir -p "$OUT/grad"
OUT=$OUT/grad timeout 200 bash scripts/gpu_ab.sh --builds m22b --impl cuda-generic --rounds 0 \
  --ncu "grad_kernel|products_kernel" --ncu-count 2 --workload train-h64-fixed
echo "ncu grad rc=$?"; date -u
