#!/usr/bin/env bash
# Queued in session 58: S4's round 0 as a right-looking substitution (s4r0 = 14345ae, branch s4r0) against main's
# kernels (main58 = 09245a1; the commits after it changed records, docs and the measuring build only):
#   1  kda-verify --suite full and backward-quick on both at one seed each (the figures change in their last digits:
#      each T_rc's terms are summed in another order; every case must pass with errors like main's), beside s4r0's
#      GPU tests but decode
#   2  gpu_ab main58 / s4r0 at h64-fixed and h96-fixed, 2 rounds, every run verified
#   3  stage clocks of both measuring builds (main58clk = d6b920d, s4r0clk) at h64-fixed: S4's cycles and busy share,
#      and its marks (where in S4 round 0 and stages 1-2 end); the stamps read their buffer from constant memory
#      now (d6b920d), so these cycles are not comparable one for one with session 58's tables
#   4  train-h64-fixed, 1 round each, in what is left of ~360 s
# Run as: OUT=$OUT bash .carry/lease/s59_l1.sh, carry [".carry/lease", ".carry/ab"] (.carry/ab: those four archives;
# .carry/slim.sh on first, so the working tree fits 64 MiB)
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s59_l1
lease_unpack main58 s4r0 main58clk s4r0clk
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lease_run gtests s4r0 4 170 ./kda_gpu_tests --gtest_filter='-*Decode*' & pg=$!
lease_same_figures full main58 s4r0
lease_same_figures backward-quick main58 s4r0
wait $pg
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/gtests.log" | head
grep -hE " FAIL |near_identical_keys|kda-verify:" "$W"/same-full-*.log | cut -c1-150
lease_checks_done checks
lease_ab main58,s4r0 150 h64-fixed h96-fixed
# The tables also go to this call's log; the call brings back 8 files at most, so the clocks' files travel as one.
mkdir -p /tmp/clocks
for b in main58clk s4r0clk; do
  lease_run "clk-$b" "$b" 4 90 ./kda-bench --workload h64-fixed --impl cuda-generic --iters 10 --stage-clocks /tmp/clk-$b
  cp "$W/clk-$b.log" /tmp/clocks/
  python3 scripts/stage_clocks.py "/tmp/clk-$b.cuda-generic.h64-fixed" | tee "/tmp/clocks/stages-$b.txt"
done
tar -czf "$OUT/clocks.tgz" -C /tmp clocks
left=$((360 - SECONDS))
echo "left for the training step: $left s"
if [ $left -gt 60 ]; then
  mkdir -p "$OUT/train"
  OUT=$OUT/train timeout $left bash scripts/gpu_ab.sh --builds main58,s4r0 --impl cuda-generic --rounds 1 \
    --workload train-h64-fixed > "$OUT/train/ab.log" 2>&1
  echo "== train rc=$?"
  grep -E "^== |backward median" "$OUT/train/ab.log"
fi
date -u
