#!/usr/bin/env bash
# Session 58, call 3: S5c's [W | U] as 8 TMA tensor stores of swizzled boxes (tmastore, f2171d5) against main's
# kernels (s4pipe = 09245a1):
#   1  kda-verify --suite full and backward-quick on both at one seed each (the same figures expected: the tiles' bytes
#      do not change), beside tmastore's GPU tests but decode (K = 64 and V = 64 instances included)
#   2  gpu_ab s4pipe / tmastore at h64-fixed and h96-fixed, 2 rounds, every run verified
#   3  stage clocks of tmastore's measuring build (tmaclk) at h64-fixed: S0's and S5c's cycles against s58_l1's table
#   4  train-h64-fixed, 1 round each, in what is left of ~330 s
# Run as: OUT=$OUT bash .carry/lease/s58_l3.sh, carry [".carry/lease", ".carry/ab"] (.carry/ab: those three archives)
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s58_l3
lease_unpack s4pipe tmastore tmaclk
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lease_run gtests tmastore 4 170 ./kda_gpu_tests --gtest_filter='-*Decode*' & pg=$!
lease_same_figures full s4pipe tmastore
lease_same_figures backward-quick s4pipe tmastore
wait $pg
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/gtests.log" | head
grep -hE " FAIL |kda-verify:" "$W"/same-full-*.log | cut -c1-150
lease_checks_done checks
lease_ab s4pipe,tmastore 150 h64-fixed h96-fixed
mkdir -p "$OUT/clocks"
for wl in h64-fixed; do
  lease_run "clk-$wl" tmaclk 4 90 ./kda-bench --workload "$wl" --impl cuda-generic --iters 10 --stage-clocks /tmp/clk
  cp "$W/clk-$wl.log" "$OUT/clocks/"
  python3 scripts/stage_clocks.py "/tmp/clk.cuda-generic.$wl" | tee "$OUT/clocks/stages-$wl.txt"
done
left=$((330 - SECONDS))
echo "left for the training step: $left s"
if [ $left -gt 60 ]; then
  mkdir -p "$OUT/train"
  OUT=$OUT/train timeout $left bash scripts/gpu_ab.sh --builds s4pipe,tmastore --impl cuda-generic --rounds 1 \
    --workload train-h64-fixed > "$OUT/train/ab.log" 2>&1
  echo "== train rc=$?"
  grep -E "^== |backward median" "$OUT/train/ab.log"
fi
date -u
