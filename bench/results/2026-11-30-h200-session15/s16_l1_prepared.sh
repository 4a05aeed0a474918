#!/usr/bin/env bash
# Prepared in session 15 for session 16's first device call (not yet run; session 15's device time ran out): branch
# statesplit (4c492f7) against main. statesplit runs the last wave of equal-length chains of the forward's state pass
# and the backward's reverse pass in 32-column tiles as a second launch (chunk_map.h plan_state_pass): predicted
# h96-fixed -100 to -200 us (the second wave's 60 CTAs of 64 columns left 72 SMs idle ~780 us; cost model 224
# against 256 of a wave's 128), train-h96-fixed's backward -100 to -300 us, h64-fixed unchanged (one wave: same plan).
# Archives in .carry/ab (scripts/gpu_build.sh in each checkout; copy .carry/bin.tar.xz to .carry/ab/NAME.tar.xz):
#   main  = main's kernels (6e8a480 in session 15; rebuild at main's head if .carry is gone)
#   split = statesplit (git worktree add /tmp/wt-split statesplit)
# Run as: OUT=$OUT bash .carry/lease/s16_l1_prepared.sh   with carry [".carry/lease", ".carry/ab"].
# Expected: the h96 verifier lines equal session 15's l1/verify-full-main.log line for line (the split changes no
# value: every tile's sums run in the same order at any width); train-h96-fixed's gradients verified by kda-bench.
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l1.log") 2>&1
date -u
mkdir -p /tmp/ab/split && tar -xJf .carry/ab/split.tar.xz -C /tmp/ab/split
(cd /tmp/ab/split && LD_LIBRARY_PATH=. timeout 120 ./kda-verify --suite full --impl cuda-generic \
  --seed 14035002217949444255 --filter workload_h96 > "$OUT/verify-h96-split.log" 2>&1; echo "verify rc=$?")
cat "$OUT/verify-h96-split.log"
date -u
OUT=$OUT timeout 400 bash scripts/gpu_ab.sh --builds main,split --impl cuda-generic --rounds 1 \
  --workload h96-fixed --workload h64-fixed --workload h96-mixed --workload train-h96-fixed
echo "gpu_ab rc=$?"
date -u
