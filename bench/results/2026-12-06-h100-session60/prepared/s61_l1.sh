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
mkdir -p /tmp/clocks
for w in h64-fixed h96-fixed; do
  lease_run "clk-$w" main62clk 4 60 ./kda-bench --workload "$w" --impl cuda-generic --iters 10 \
    --stage-clocks "/tmp/clk-main62clk"
  cp "$W/clk-$w.log" /tmp/clocks/
  python3 scripts/stage_clocks.py "/tmp/clk-main62clk.cuda-generic.$w" | tee "/tmp/clocks/stages-main62clk-$w.txt"
done
tar -czf "$OUT/clocks.tgz" -C /tmp clocks
echo "done at $SECONDS s"
date -u
