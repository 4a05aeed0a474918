#!/usr/bin/env bash
# Prepared in session 60 for the next session's first call: S0's new marks (KDACLK3: mark 1 = the rows staged, mark
# 2 = the previous task's bulk copies read out) say which of the two S0's barrier waits for.
#   main62clk  the measuring build of main at cfc5495 (kernels as c61911c)
# 1  stage clocks of main62clk at h64-fixed and h96-fixed (stage_clocks.py tables, marks included)
# Build first: scripts/gpu_build.sh --stage-clocks --ab main62clk on main (or its successor), then .carry/slim.sh on
# (session 59's prepared/slim.sh), and run as OUT=$OUT bash .carry/lease/s61_l1.sh, carry [".carry/lease",
# ".carry/ab"]. Add the step's own builds beside it: the call costs ~40 s.
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s61_l1
lease_unpack main62clk
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lease_clocks main62clk h64-fixed h96-fixed
echo "done at $SECONDS s"
date -u
