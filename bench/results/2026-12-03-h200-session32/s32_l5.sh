#!/usr/bin/env bash
# Session 32, call 5 (~200 s): issue #6's layout criterion on main = 32a25f5 (kda-bench's new layout workloads):
# the standard mixed layouts, the same moved by one token, and random packed layouts of the same 8192 tokens drawn
# from fresh seeds (three runs each, each printing its layout and seed), forward verified then timed; then the
# training steps of h64-mixed and h64-random (one run each).
# Run as: OUT=$OUT bash .carry/lease/s32_l5.sh   carry [".carry/lease", ".carry/ab/main.tar.xz", ".carry/ab/main.COMMIT"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l5
lease_unpack main
commit=$(cut -c1-7 .carry/ab/main.COMMIT)
mkdir -p "$OUT/json"
cd /tmp/ab/main
i=0
for wl in h64-mixed h64-mixed-shift h64-random h64-random h64-random h64-uniform h64-fixed \
          h96-mixed h96-mixed-shift h96-random h96-random h96-random h96-uniform h96-fixed \
          train-h64-mixed train-h64-random; do
  i=$((i + 1))
  LD_LIBRARY_PATH=. timeout 60 ./kda-bench --impl cuda-generic --iters 100 --workload $wl --commit "$commit" \
    --json "$OUT/json/$i-$wl.json" | grep -E "^[a-z0-9-]+:|layout|median|WRONG|ERROR"
done
date -u
