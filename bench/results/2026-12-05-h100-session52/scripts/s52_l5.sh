#!/usr/bin/env bash
# Session 52, call 5: cb2 (the segments' combine in two thread groups of 4 rows a CTA, bit-identical by construction)
# against wgplan (1daeb42).
#   1  kda-verify --suite full on both with one seed: the same figures row for row (lease_same_figures), and cb2's
#      segment GPU tests
#   2  every launch of one h4-32k step under ncu on cb2 (the combine: 45 us on wgplan)
#   3  gpu_ab wgplan,cb2, 2 rounds: h4-32k (predicted -15..-20 us), h16-32k (-4..-5 us)
# Run as: OUT=$OUT bash .carry/lease/s52_l5.sh   carry [".carry/lease", ".carry/ab/wgplan.tar.xz", ".carry/ab/cb2.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s52_l5
lease_unpack wgplan cb2
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lease_run seggt cb2 4 120 ./kda_gpu_tests --gtest_filter='*segments*:*Segment*' &
pg=$!
lease_same_figures full wgplan cb2
wait $pg
grep -hE "^\[  (FAILED|PASSED|SKIPPED) |tests? ran" "$W/seggt.log" | head
lease_checks_done checks-cb2
lease_ncu_launches cb2 h4-32k .
lease_ab wgplan,cb2 200 h4-32k h16-32k
