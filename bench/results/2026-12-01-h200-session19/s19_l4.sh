#!/usr/bin/env bash
# Session 19 call 4 (~250 s): ncu with source (stall reasons by line) of stg2's state pass at h64-fixed, stgov's (to
# see why copying each tile early lost ~+110 us), and stg2's reverse pass at train-h64-fixed (1.15 ms, Mem Busy 55%).
# Run as: OUT=$OUT bash .carry/lease/s19_l4.sh   with carry [".carry/lease", ".carry/ab"].
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l4.log") 2>&1
date -u
for b in stg2 stgov; do mkdir -p /tmp/ab/$b && tar -xJf .carry/ab/$b.tar.xz -C /tmp/ab/$b; done
for x in "stg2 state_wgmma h64-fixed" "stgov state_wgmma h64-fixed" "stg2 reverse_wgmma train-h64-fixed"; do
  set -- $x; mkdir -p "$OUT/$1-$2"
  OUT=$OUT/$1-$2 timeout 110 bash scripts/gpu_ab.sh --builds $1 --impl cuda-generic --rounds 0 --ncu $2 \
    --ncu-count 1 --workload $3
  echo "gpu_ab ncu $x rc=$?"
done
date -u
