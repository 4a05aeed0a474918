#!/usr/bin/env bash
# Prepared in session 62 as its call 4 (never started: no machine, then too little budget). Issue #6's other six
# prefill workloads beside FLA in one process (scripts/bench_torch.py --part prefill, kda and FLA, 100 graph replays)
# with BUILD's libkda_torch.so (default main63, main's kernels d12886f); call 2 ran h64-fixed and h96-fixed. Each
# workload under its own limit, Triton's cache (calls 2-3's, .carry/triton, 8.8 MB, not in the repository: without it
# FLA compiles anew, ~100 s a workload) carried in and handed back after each (copy $OUT/triton to .carry/triton).
# Run as OUT=$OUT bash .carry/lease/s62_l4.sh [BUILD] with .carry/slim.sh on, carry [".carry/lease", ".whl",
# ".carry/triton", ".carry/ab/BUILD.tar.xz", ".carry/ab/BUILD.COMMIT"]; <= LIMIT (default 540) + ~20 s.
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s62_l4
b=${1:-main63}
lease_unpack "$b"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lease_torch_prefill "$b" "${LIMIT:-540}" h64-mixed h64-uniform h96-mixed h96-uniform h4-32k h16-32k
echo "done at $SECONDS s"
date -u
