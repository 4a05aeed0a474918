#!/usr/bin/env bash
# Session 38, call 5 (~100 s, the budget's last ~290 s): be (main plus the wgmma P1 taken only by the Hopper path,
# KDA_BACKEND_CUDA_CHUNKED back on mma.sync): the layout probes, ProductsP1MatchesFp64 and the chunked / Hopper
# backward GPU tests (both products instances at K = V = 128).
# Run as: OUT=$OUT bash .carry/lease/s38_l5.sh
#   carry [".carry/lease", ".carry/ab/be.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l5
lease_unpack be
lease_run tests be 8 150 ./kda_gpu_tests --gtest_filter='*Wgmma*:*ChunkedBackward*:*HopperBackward*'
grep -hE "^\[  (FAILED|PASSED) |tests? ran|products P1" "$W/tests.log" | head -20
lease_checks_done
