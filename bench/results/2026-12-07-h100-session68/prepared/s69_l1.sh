#!/usr/bin/env bash
# Prepared in session 68 as the next first call. Session 68 landed three bit-identical steps on the state pass's chain
# (uahead, ahead, stsm: the chain's own path 5498 -> 4875 cycles a step at h64-fixed by the stage clocks), level in
# time on an H100, where the pass is bound on its bytes (DRAM 84%); on an H200 the chain should bind instead. With
# stsm the output warpgroup became the last at phase A's barrier: its o stores (16 STG.32 a thread, MIO-bound) are on
# the path. Candidate ostage (branch, 7914157 on main; never run): o through shared memory (stmatrix.x4 into an output
# tile) and out by a bulk copy a row, where out is 16-bit with 16-byte aligned rows; the same values to the same
# places, so bit-identical by construction.
# Archives: stateclk (d617872: the kernels before session 68, with the stamps), stsmclk (f492739: main's kernels, with
# the stamps), ostageclk (7914157, with the stamps), main68py (b41cf9c: main, --python). This call:
# 1  in parallel: the torch op's CUDA tests with main68py (the op had run the new state pass once, session 68's call
#    6: 71 passed); ostageclk's kda-verify full at one seed beside stsmclk (the same figures) and its GPU tests but
#    backward / stress / decode;
# 2  the state-pass clocks of stateclk, stsmclk and (if it passed) ostageclk at h64- and h96-fixed;
# 3  gpu_ab of those builds, 2 rounds, h64- and h96-fixed (on an H200: session 68's chain work in time);
# 4  on an H200 only: the six workloads beside FLA through main68py's op (the last H200 figures are session 50's).
# Run as OUT=$OUT bash .carry/lease/s69_l1.sh with .carry/slim.sh on and timeout_s 600, carry [".carry/lease",
# ".carry/ab", ".whl", ".carry/triton"] (~56 MB; set LIMIT below 540 when the budget is short); returns s69_l1.log,
# final.tgz, py/python_tests.log, clocks.tgz, ab/results.tar, and on an H200 prefill.tgz and the Triton cache's parts.
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s69_l1
lease_unpack stateclk stsmclk ostageclk main68py
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lim=${LIMIT:-540}
h200=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -c H200)
pl=$((lim - 30)); [ "$pl" -gt 200 ] && pl=200
lease_py_tests main68py "$pl" "cuda or fla_layer" > "$W/py-summary.log" 2>&1 & pp=$!
lease_run gtests-os ostageclk 3 200 ./kda_gpu_tests --gtest_filter='-*Backward*:*Stress*:*Decode*' & pg=$!
lease_same_figures full stsmclk ostageclk
wait $pp $pg
cat "$W/py-summary.log"
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/gtests-os.log" | head -5
echo "checks done at $SECONDS s"
lease_checks_done final
builds=stateclk,stsmclk
lease_passed same-full-ostageclk && grep -q "^\[  PASSED  \]" "$W/gtests-os.log" && ! grep -q "^\[  FAILED  \]" \
  "$W/gtests-os.log" && builds=$builds,ostageclk
for b in ${builds//,/ }; do lease_clocks "$b" h64-fixed h96-fixed; done
echo "clocks done at $SECONDS s"
left=$((lim - SECONDS - (h200 == 0 ? 20 : 200)))
[ "$left" -gt 160 ] && left=160
[ "$left" -gt 60 ] && lease_ab "$builds" "$left" h64-fixed h96-fixed
if [ "$h200" != 0 ]; then
  left=$((lim - SECONDS))
  [ "$left" -gt 80 ] && lease_torch_prefill main68py "$left" h64-fixed h96-fixed h64-mixed h96-mixed h64-uniform h96-uniform
fi
echo "done at $SECONDS s"
date -u
