#!/usr/bin/env bash
# Session 37, call 3 (~300 s): what rue (= main c17467f's code: rsq + unit + ea) must pass to land, in parallel:
# backward-full whole (lease_bwd_full), the forward's full suite, and every GPU test but the decode ones (rue changes
# no decode kernel: they take their norms from decode_math.cuh; call 2's full run was cut at 240 s in serving_h32_b512
# with no failure before it).
# Run as: OUT=$OUT bash .carry/lease/s37_l3.sh
#   carry [".carry/lease", ".carry/ab/rue.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l3
lease_unpack rue
lease_run tests rue 2 240 ./kda_gpu_tests --gtest_filter='-*Decode*' & p1=$!
lease_run full rue 4 240 ./kda-verify --suite full --impl cuda-generic & p2=$!
lease_bwd_full rue & p3=$!
wait $p1 $p2 $p3
for n in full bwdfull-a bwdfull-b bwdfull-c bwdfull-d; do lease_passed $n && echo "rue: $n passed" || echo "rue: $n FAILED"; done
grep -hE "^bwd_" "$W"/bwdfull-*.log | cut -c1-160
grep -hE "^\[  (FAILED|PASSED) |tests? ran|ChannelStrided" "$W/tests.log" | head -20
lease_checks_done
