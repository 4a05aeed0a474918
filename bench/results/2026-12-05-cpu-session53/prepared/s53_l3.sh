#!/usr/bin/env bash
# Session 53 (prepared), call 3: phase 1's profile by line for the next step, on BUILD (the better of call 1's
# builds, e.g. both or p1loop): ncu's full set with source of one h64-fixed phase-1 launch (gpu_ab --ncu), to read
# off the device with scripts/ncu_stages.py --sass (session 42's `prepare_by_line.txt` is the last such profile: the
# copies' wait 6.7%, the barrier before S5 6.5%, S0's loads and the barrier after them ~10%, S3's diagonal warps 7%).
# ~120 s + start. Run as: OUT=$OUT bash .carry/lease/s53_l3.sh BUILD
#   carry [".carry/lease", ".carry/ab/BUILD.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
b=$1
lease_begin s53_l3
lease_unpack "$b"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p "$OUT/ncu"
OUT=$OUT/ncu timeout 200 bash scripts/gpu_ab.sh --builds "$b" --rounds 0 --ncu prepare_kernel --ncu-count 1 \
  --workload h64-fixed > "$OUT/ncu/gpu_ab.log" 2>&1
echo "== ncu prepare rc=$?"
tail -5 "$OUT/ncu/gpu_ab.log"
date -u
