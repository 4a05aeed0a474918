#!/usr/bin/env bash
# Session 52, call 7: cb3 (the combine with two columns of 4 rows a thread: 16 shared-memory wavefronts a k-step
# instead of 20; bit-identical by construction) against wgplan (1daeb42). A test of ncu's shared-memory reading of the
# combine's 45 us: predicted 45 -> ~36 us if the wavefronts pace it.
#   1  cb3's segment GPU tests (the budget left no room for the verifier's same-figures check)
#   2  every launch of one h4-32k step under ncu on cb3
#   3  gpu_ab wgplan,cb3, 2 rounds at h4-32k
# Run as: OUT=$OUT bash .carry/lease/s52_l7.sh   carry [".carry/lease", ".carry/ab/wgplan.tar.xz", ".carry/ab/cb3.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s52_l7
lease_unpack wgplan cb3
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lease_run seggt cb3 4 60 ./kda_gpu_tests --gtest_filter='*segments*:*Segment*'
grep -hE "^\[  (FAILED|PASSED|SKIPPED) |tests? ran" "$W/seggt.log" | head -4
lease_checks_done checks-cb3
lease_ncu_launches cb3 h4-32k 'combine|state_wgmma'
lease_ab wgplan,cb3 80 h4-32k
