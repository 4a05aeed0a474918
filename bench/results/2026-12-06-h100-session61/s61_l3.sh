#!/usr/bin/env bash
# Session 61, call 3: the stage clocks of halfclk (branch halfgrid, a diagnostic never landed: main's measuring build,
# d12886f, with phase 1 on half the SMs) at h64-fixed: what a task costs under half the DRAM demand (call 1's s0cpkclk
# has the whole GPU's). (The FLA comparison this call was first meant for needs ~300 s of Triton compile on a cold
# cache, more than the budget left.)
# Run as OUT=$OUT bash .carry/lease/s61_l3.sh with .carry/slim.sh on, carry [".carry/lease", ".carry/ab/halfclk.tar.xz",
# ".carry/ab/halfclk.COMMIT"]; ~30 s.
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s61_l3
lease_unpack halfclk
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lease_clocks halfclk h64-fixed
echo "done at $SECONDS s"
date -u
