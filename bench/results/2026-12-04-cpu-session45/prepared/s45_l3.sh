#!/usr/bin/env bash
# Prepared in session 44 (as next_lease2.sh), the third call of session 45's plan (~300 s + start): rv3's forward
# checks (the state pass changed): kda-verify --suite full beside the GPU tests other than the backward / stress ones.
# Run as: OUT=$OUT bash .carry/lease/s45_l3.sh
# carry [".carry/lease", ".carry/ab/rv3.tar.xz"] (the archives by name: .carry/ab holds four, more than a call carries)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l2
lease_unpack rv3
lease_run fwdfull rv3 4 280 ./kda-verify --impl cuda-generic --suite full & pf=$!
lease_run gtests rv3 4 280 ./kda_gpu_tests --gtest_filter='-*Backward*:*Stress*' & pg=$!
wait $pf $pg
lease_passed fwdfull && echo "rv3: forward full passed" || echo "rv3: forward full FAILED"
grep -hE " FAIL |kda-verify:" "$W/fwdfull.log" | head
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/gtests.log" | head
lease_checks_done
