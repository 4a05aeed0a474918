#!/usr/bin/env bash
# Session 47: the timing s47_l2.sh gated off (its only failure, k128_beta_2_near_identical_keys_segments, is the
# case's own conditioning, not the split: the CPU model gives the unsplit chain the same errors on those inputs).
# gpu_ab.sh main46 (054efa6, before segsplit) against qkfin2 (42a1dca: main with segsplit merged) at h4-32k, h64-fixed
# and kimi-8k, two rounds (~200 s + start). Run as: OUT=$OUT bash .carry/lease/s47_l3.sh
# carry [".carry/lease", ".carry/ab/main46.tar.xz", ".carry/ab/qkfin2.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s47_l3
lease_unpack main46 qkfin2
lease_ab main46,qkfin2 260 h4-32k h64-fixed kimi-8k
