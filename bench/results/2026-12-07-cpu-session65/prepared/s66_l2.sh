#!/usr/bin/env bash
# Prepared in session 65 for the call after s66_l1.sh, only if chainreg passed its checks there and timed faster than
# main63: issue #6's four packed standard workloads (s66_l1.sh times h64- and h96-fixed) beside FLA in one process a workload
# (scripts/bench_torch.py --part prefill, kda and FLA, 100 graph replays) with chainregpy's libkda_torch.so
# (chainregpy = chainreg's head 6fb03d5 built with scripts/gpu_build.sh --python, session 65), then h4-32k and h16-32k
# in what is left of LIMIT (default 540). Triton's cache (.carry/triton) carried in and handed back after each
# workload. Run as OUT=$OUT bash .carry/lease/s66_l2.sh with .carry/slim.sh on, carry [".carry/lease", ".whl",
# ".carry/triton", ".carry/ab/chainregpy.tar.xz", ".carry/ab/chainregpy.COMMIT"]; <= LIMIT + ~20 s. Returns
# s66_l2.log, prefill.tgz and the Triton cache's parts.
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s66_l2
lease_unpack chainregpy
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lease_torch_prefill chainregpy "${LIMIT:-540}" h64-mixed h64-uniform h96-mixed h96-uniform h4-32k h16-32k
echo "done at $SECONDS s"
date -u
