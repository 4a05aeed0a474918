#!/usr/bin/env bash
# Session 47 (~250 s + start): qkfin3 (qkfin2 + the segment test cases taken apart: beta near 2; near-identical keys
# at beta near 1) runs the segment GPU tests, then gpu_ab.sh main46 (054efa6, before segsplit) against qkfin3 at
# h4-32k and h64-fixed, two rounds: segsplit's timing interleaved, which s46_l6 measured once.
# Run as: OUT=$OUT bash .carry/lease/s47_l4.sh
# carry [".carry/lease", ".carry/ab/main46.tar.xz", ".carry/ab/qkfin3.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s47_l4
lease_unpack main46 qkfin3
lease_run smoke qkfin3 4 90 ./kda_gpu_tests --gtest_filter='*_segments*:*SegmentCases*'
grep -hE "^\[  (FAILED|PASSED) |tests? ran|_segments .*(PASS|FAIL)" "$W/smoke.log" | head -30
lease_checks_done checks-l4
lease_ab main46,qkfin3 170 h4-32k h64-fixed
