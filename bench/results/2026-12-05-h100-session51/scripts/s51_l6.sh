#!/usr/bin/env bash
# Session 51, call 6 (~130 s + start): combine (the segmented state pass's combine with M_j streamed through a
# cp.async ring of quarters, 8 rows a CTA; bit-identical arithmetic) against aqk2 (main's kernels): the segment GPU
# tests, the full verifier's stress probes (H = 8, 4096 tokens: split in segments), gpu_ab at h4-32k, and every
# launch of one h4-32k step under ncu.
# Run as: OUT=$OUT bash .carry/lease/s51_l6.sh
# carry [".carry/lease", ".carry/ab/aqk2.tar.xz", ".carry/ab/combine.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s51_l6
lease_unpack aqk2 combine
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lease_run smoke combine 4 60 ./kda_gpu_tests --gtest_filter='*_segments*:*SegmentCases*' & p1=$!
lease_run stress combine 4 100 ./kda-verify --impl cuda-generic --suite full --filter stress_ & p2=$!
wait $p1 $p2
grep -hE "^\[  (FAILED|PASSED) |tests? ran|FAIL|kda-verify:|seed" "$W/smoke.log" "$W/stress.log" | head -30
lease_checks_done checks-l6
lease_ncu_launches combine h4-32k .
lease_ab aqk2,combine 80 h4-32k
