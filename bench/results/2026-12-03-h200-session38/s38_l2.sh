#!/usr/bin/env bash
# Session 38, call 2 (two runs, ~2 s each): the test binary of p1w with the new ProductsP1MatchesFp64 (products_p1
# alone against fp64 sums) and, in the second run, a debug probe (one slice copied by cp.async or by plain loads and
# stores, then one bf16x3 wgmma), to find where call 1's failures came from. Both copy forms gave the same wrong
# values: the planes' addresses, not the copies' timing (the fix: plane_at; the probe was deleted after).
# Run as: OUT=$OUT bash .carry/lease/s38_l2.sh
#   carry [".carry/lease", ".carry/ab/p1t.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l2
lease_unpack p1t
cd /tmp/ab/p1t && LD_LIBRARY_PATH=. timeout 60 ./kda_gpu_tests --gtest_filter='WgmmaLayout.Products*:WgmmaLayout.Debug*' 2>&1 |
  grep -E "products P1|DEBUG|OK|FAILED|Failure|seed|Which|Expected|Actual" | head -40
date -u
