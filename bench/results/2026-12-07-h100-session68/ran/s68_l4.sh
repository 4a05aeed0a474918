#!/usr/bin/env bash
# Session 68, call 4: stsm (branch, f492739 on main = ahead): the state pass's S and V_new planes stored by
# stmatrix.x4, four accumulator pairs an instruction, a quarter of the 32-bit stores (the chain's plane stores sit in
# its phase-B work after, ~1.57 K cycles of a 6.4 K step by call 2's clocks; V_new's in phase A's ~1.3 K). The same
# bytes to the same places: bit-identical by construction. 255 registers in the forward instance (ahead 240), no spill.
# 1  checks of stsmclk: full and backward-quick at one seed beside aheadclk (the same figures), GPU tests but backward /
#    stress / decode;
# 2  the state-pass clocks of aheadclk and stsmclk at h64- and h96-fixed;
# 3  gpu_ab of the two, 2 rounds, if the time allows; then ncu's full set with source counters on main68's state pass.
# Run as OUT=$OUT bash .carry/lease/s68_l4.sh with .carry/slim.sh on (LIMIT below the budget left), carry
# [".carry/lease", ".carry/ab"] (aheadclk, stsmclk, main68); returns s68_l4.log, final.tgz, clocks.tgz, ab/results.tar.
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s68_l4
lease_unpack aheadclk stsmclk main68
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lim=${LIMIT:-540}
lease_run gtests-st stsmclk 4 200 ./kda_gpu_tests --gtest_filter='-*Backward*:*Stress*:*Decode*' & pt=$!
lease_same_figures full aheadclk stsmclk
lease_same_figures backward-quick aheadclk stsmclk
wait $pt
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/gtests-st.log" | head -5
echo "checks done at $SECONDS s"
lease_checks_done final
builds=aheadclk
lease_passed same-full-stsmclk && lease_passed same-backward-quick-stsmclk && builds=$builds,stsmclk
for b in ${builds//,/ }; do lease_clocks "$b" h64-fixed h96-fixed; done
echo "clocks done at $SECONDS s"
left=$((lim - SECONDS - 60))
[ "$left" -gt 150 ] && left=150
[ "$left" -gt 60 ] && [ "$builds" != aheadclk ] && lease_ab "$builds" "$left" h64-fixed h96-fixed
if [ $((lim - SECONDS)) -gt 50 ]; then
  (cd /tmp/ab/main68 && LD_LIBRARY_PATH=. timeout $((lim - SECONDS - 10)) ncu --clock-control none -k regex:state_wgmma \
    -c 1 --set full --import-source yes --section SourceCounters -o "$OUT/ncu-state-main68" ./kda-bench \
    --workload h64-fixed --impl cuda-generic --no-verify --iters 1 --warmup 0 > "$W/ncu.log" 2>&1)
  echo "ncu rc=$?"; tail -3 "$W/ncu.log"
fi
echo "done at $SECONDS s"
date -u
