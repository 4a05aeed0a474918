#!/usr/bin/env bash
# Session 47: s46_l5.sh with qkfin2 (42a1dca: main with segsplit merged plus the backward finishing) for segsplit; the
# gtest filter fixed to reach the Own/... cases.
# Prepared in session 46 (no device lent): the first run of branch qkfin2 (974c411: few chains on many SMs, the state
# pass cut into segments: chunk_map.h plan_segments, chunk_state.cu's kSeg instance, chunk_segments.cu's combine),
# against main46 (054efa6, main's kernels with the h4-32k workload). ~360 s + start.
#   1  qkfin2's GPU tests (the five "_segments" cases under CudaChunked / CudaHopper, SegmentCasesSplitTheirChains,
#      the rest of the chunked forward's cases), bounded: a wrong launch may hang.
#   2  kda-verify --suite full on both at one seed, stress / layout / holdout rows (the stress probes, H = 8 at 4096
#      tokens, take 8 segments on 132 SMs): qkfin2's errors beside main's.
#   3  if 1 and 2 pass: gpu_ab.sh main46,qkfin2 at h4-32k (predicted: the state pass ~3.4x faster by the plan's own
#      cost model), h64-fixed and kimi-8k (no split: equal), two rounds.
# Archives: .carry/ab/{main46,qkfin2}.tar.xz on the session-46 machine (if gone: scripts/gpu_build.sh on each
# commit, copied to .carry/ab/NAME.tar.xz). Run as: OUT=$OUT bash .carry/lease/s46_l5.sh
# carry [".carry/lease", ".carry/ab/main46.tar.xz", ".carry/ab/qkfin2.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s47_l2
lease_unpack main46 qkfin2
lease_run smoke qkfin2 4 150 ./kda_gpu_tests --gtest_filter='*_segments*:*SegmentCases*:*CudaChunked*:*CudaHopper*'
grep -hE "^\[  (FAILED|PASSED) |tests? ran|_segments|SegmentCases" "$W/smoke.log" | head -30
lease_same_figures "full --filter stress_,layout_,holdout" main46 qkfin2
lease_checks_done checks-l5
if grep -q "^\[  PASSED  \]" "$W/smoke.log" && ! grep -q "^\[  FAILED  \]" "$W/smoke.log" &&
  lease_passed "same-full-filter-stress-layout-holdout-qkfin2"; then
  lease_ab main46,qkfin2 200 h4-32k h64-fixed kimi-8k
else
  echo "qkfin2 failed its checks: no timing"
fi
date -u
