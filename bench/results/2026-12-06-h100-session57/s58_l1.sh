#!/usr/bin/env bash
# Queued in session 57: one phase-1 step against main's kernels (rowload2 = 7073687; the commits after it changed
# records and docs only):
#   s4pipe (427f1b0) S4's stages load a 16-column block's operands before its first multiply (the same bits)
#   1  kda-verify --suite full and backward-quick on both at one seed each (the same figures expected: the backward's
#      recompute runs S4 too), beside s4pipe's GPU tests but decode
#   2  gpu_ab rowload2 / s4pipe at h64-fixed and h96-fixed, 2 rounds, every run verified
#   3  phase 1's stage clocks on main's kernels (stageclk = 4d2a085, built with --stage-clocks) at h64-fixed and
#      h96-fixed: scripts/stage_clocks.py's table of each stage's median cycles, last warp and its lead
#   4  train-h64-fixed, 1 round each, in what is left of ~400 s
# Run as: OUT=$OUT bash .carry/lease/s58_l1.sh, carry [".carry/lease", ".carry/ab"] (.carry/ab: those three archives)
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s58_l1
lease_unpack rowload2 s4pipe stageclk
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lease_run gtests s4pipe 4 170 ./kda_gpu_tests --gtest_filter='-*Decode*' & pg=$!
lease_same_figures full rowload2 s4pipe
lease_same_figures backward-quick rowload2 s4pipe
wait $pg
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/gtests.log" | head
grep -hE " FAIL |stress_near_identical_keys_beta|kda-verify:" "$W"/same-full-*.log | cut -c1-150
lease_checks_done checks
lease_ab rowload2,s4pipe 150 h64-fixed h96-fixed
mkdir -p "$OUT/clocks"
for wl in h64-fixed h96-fixed; do
  lease_run "clk-$wl" stageclk 4 90 ./kda-bench --workload "$wl" --impl cuda-generic --iters 10 --stage-clocks /tmp/clk
  cp "$W/clk-$wl.log" "$OUT/clocks/"
  python3 scripts/stage_clocks.py "/tmp/clk.cuda-generic.$wl" | tee "$OUT/clocks/stages-$wl.txt"
done
left=$((400 - SECONDS))
echo "left for the training step: $left s"
if [ $left -gt 60 ]; then
  mkdir -p "$OUT/train"
  OUT=$OUT/train timeout $left bash scripts/gpu_ab.sh --builds rowload2,s4pipe --impl cuda-generic --rounds 1 \
    --workload train-h64-fixed > "$OUT/train/ab.log" 2>&1
  echo "== train rc=$?"
  grep -E "^== |backward median" "$OUT/train/ab.log"
fi
date -u
