#!/usr/bin/env bash
# Prepared in session 68 as the next first call. Session 68 landed three bit-identical steps on the state pass's chain
# (uahead, ahead, stsm: the chain's own path 5498 -> 4875 cycles a step at h64-fixed by the stage clocks), level in
# time on an H100, where the pass is bound on its bytes (DRAM 84%). On an H200 the chain should bind instead.
# Archives: stateclk (d617872: the kernels before session 68, with the stamps), stsmclk (f492739: main's kernels, with
# the stamps), main68py (b41cf9c: main, --python). This call:
# 1  the torch op's CUDA tests with main68py (the op had not run the new state pass);
# 2  the state-pass clocks of stateclk and stsmclk at h64- and h96-fixed;
# 3  on an H200 only: gpu_ab stateclk,stsmclk (2 rounds, h64- and h96-fixed: session 68's chain work in time), then
#    the six workloads beside FLA through main68py's op (the last H200 figures are session 50's).
# Run as OUT=$OUT bash .carry/lease/s69_l1.sh with .carry/slim.sh on and timeout_s 600, carry [".carry/lease",
# ".carry/ab", ".whl", ".carry/triton"] (~47 MB; set LIMIT below 540 when the budget is short); returns s69_l1.log,
# py/python_tests.log, clocks.tgz, and on an H200 ab/results.tar, prefill.tgz and the Triton cache's parts.
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s69_l1
lease_unpack stateclk stsmclk main68py
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lim=${LIMIT:-540}
h200=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -c H200)
pl=$((lim - 30)); [ "$pl" -gt 200 ] && pl=200
lease_py_tests main68py "$pl" "cuda or fla_layer"
echo "python tests done at $SECONDS s"
lease_clocks stateclk h64-fixed h96-fixed
lease_clocks stsmclk h64-fixed h96-fixed
echo "clocks done at $SECONDS s"
if [ "$h200" != 0 ]; then
  left=$((lim - SECONDS - 200))
  [ "$left" -gt 150 ] && left=150
  [ "$left" -gt 60 ] && lease_ab stateclk,stsmclk "$left" h64-fixed h96-fixed
  left=$((lim - SECONDS))
  [ "$left" -gt 80 ] && lease_torch_prefill main68py "$left" h64-fixed h96-fixed h64-mixed h96-mixed h64-uniform h96-uniform
fi
echo "done at $SECONDS s"
date -u
