#!/usr/bin/env bash
# Prepared in session 45: a fourth call (~300 s + start) once s45_l1-l3 have run: both prepared changes together
# (rq = b13532d: branch qkfin merged with rv2) against main's code, to see that their gains add before landing both.
# Run as: OUT=$OUT bash .carry/lease/s45_l4.sh
# carry [".carry/lease", ".carry/ab/both.tar.xz", ".carry/ab/rq.tar.xz"] (the archives by name: .carry/ab holds four,
# more than a call carries)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l4
lease_unpack both rq
lease_run smoke rq 2 120 ./kda_gpu_tests --gtest_filter='*Backward*bf16_grads*:*Wgmma*'
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/smoke.log" | head -20
lease_checks_done smoke
lease_ab both,rq 260 train-h64-fixed
