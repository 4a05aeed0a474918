#!/usr/bin/env bash
# Session 46's short call at the session's end: segsplit's GPU tests (bounded) and one kda-bench run of h4-32k,
# h64-fixed on main46 and segsplit (the A/B of s46_l5 without its verifier step). ~200 s.
# carry [".carry/lease", ".carry/ab/main46.tar.xz", ".carry/ab/segsplit.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l6
lease_unpack main46 segsplit
lease_run smoke segsplit 4 120 ./kda_gpu_tests --gtest_filter='*_segments*:*SegmentCases*:CudaChunked*:CudaHopper*'
grep -hE "^\[  (FAILED|PASSED) |tests? ran|_segments|SegmentCases" "$W/smoke.log" | head -30
for b in main46 segsplit; do
  lease_run "bench-$b" "$b" 4 100 ./kda-bench --impl cuda-generic --workload h4-32k --workload h64-fixed --iters 50
  grep -hE "^(h4-32k|h64-fixed):|median|verified" "$W/bench-$b.log"
done
lease_checks_done checks-l6
