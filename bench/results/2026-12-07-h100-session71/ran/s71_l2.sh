#!/usr/bin/env bash
# Session 71's first call (s71_l1.sh with pipewave added, main70 dropped). Builds (scripts/gpu_build.sh --ab NAME):
#   main71 (4815fed): main, the gradient pipe;
#   dsmx (fdaeb9d): grad_tc's halves exchange partial dots by one bulk copy on the partner's mbarrier;
#   pipewave (dd2aacf): the pipe also on the partial-reverse-wave path (train-h96-fixed), the plan over a head range.
# 1 checks: backward-quick at one seed on all three (the same figures: every change keeps the bits), the backward /
#   stress GPU tests of dsmx and pipewave (HopperPartialReverseWaveMatchesReference is pipewave's new one);
# 2 gpu_ab main71,dsmx,pipewave at train-h64-fixed, one round (pipewave level there but for ptxas's spill: 8 -> 40 B);
# 3 gpu_ab main71,pipewave at train-h96-fixed, one round.
# Run as OUT=$OUT bash .carry/lease/s71_l2.sh, timeout_s 600, carry [".carry/lease", ".carry/ab"].
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s71_l2
lease_unpack main71 dsmx pipewave
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lim=${LIMIT:-560}
lease_run btests-dsmx dsmx 2 200 ./kda_gpu_tests --gtest_filter='*Backward*:*Stress*' & p1=$!
lease_run btests-pipewave pipewave 2 200 ./kda_gpu_tests --gtest_filter='*Backward*:*Stress*' & p2=$!
lease_same_figures backward-quick main71 dsmx pipewave
wait $p1 $p2
for b in dsmx pipewave; do
  echo "== $b GPU tests"; grep -hE "^\[  (FAILED|PASSED) |tests? ran|PartialReverseWave" "$W/btests-$b.log" | head -8
done
echo "checks done at $SECONDS s"
lease_checks_done checks
ab1() {  # lease_ab with one round: BUILDS LIMIT WORKLOAD
  mkdir -p "$OUT/$4"
  OUT=$OUT/$4 timeout "$2" bash scripts/gpu_ab.sh --builds "$1" --impl cuda-generic --rounds 1 --workload "$3"
  echo "gpu_ab $3 rc=$?"
}
left=$((lim - SECONDS - 170))
[ "$left" -gt 230 ] && left=230
[ "$left" -gt 60 ] && ab1 main71,dsmx,pipewave "$left" train-h64-fixed ab-h64
left=$((lim - SECONDS))
[ "$left" -gt 80 ] && ab1 main71,pipewave "$left" train-h96-fixed ab-h96
(cd "$W" && tar -czf "$OUT/final.tgz" .)
echo "done at $SECONDS s"
date -u
