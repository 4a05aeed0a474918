#!/usr/bin/env bash
# Prepared in session 61 for the next session's first call (not run: the budget was spent). Builds
# (scripts/gpu_build.sh; if .carry was lost, rebuild them: main63 = --ab main63 on main; cpdefer = `git am
# prepared/cpdefer.patch` on a branch from main, cpdefer2 = `git am prepared/cpdefer2-on-cpdefer.patch` on that, each
# --ab NAME and --stage-clocks --ab NAMEclk):
#   main63      main's kernels (d12886f)
#   cpdefer     S5c's [W | U] bulk copies issued in the next task's S0 once its rows are staged, not beside its row
#               loads; all waited for at S0's barrier, as now
#   cpdefer2    cpdefer with W's copies waited for at S0b's end (their stage is first written again by S1), U's at
#               S0's barrier (beta v follows it)
# Both keep every operation in its order (the same bits by construction). halfclk (session 61, call 3) left S0's
# ~5 K-cycle wait for its rows in place on half the SMs, so the wait is not DRAM's bandwidth; this asks whether it is
# the copies leaving the SM beside the loads. Read the clocks' marks: mark 1 (rows staged) early and mark 2 (copies
# read out) late would say so.
# 1  stage clocks of cpdeferclk and cpdefer2clk at h64-fixed (session 61's call 1 has s0cpkclk's: main63's kernels
#    with the stamps)
# 2  gpu_ab main63 / cpdefer / cpdefer2 at h64-fixed and h96-fixed, 2 rounds, every run verified
# 3  full on main63, cpdefer and cpdefer2 at one seed (the same figures expected)
# 4  (added in session 62) stage clocks of nostoreclk (branch nostore, a diagnostic never landed: main's kernels with
#    the stamps and phase 1's workspace stores skipped at run time, every product still computed) at h64-fixed: what a
#    task costs with nothing leaving the SM but the loads, against session 61's s0cpkclk (27353 cycles)
# Run as OUT=$OUT bash .carry/lease/s62_l1.sh with .carry/slim.sh on, carry [".carry/lease", ".carry/ab"] with
# .carry/ab holding only those six archives (~56 MB); ~220 s.
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s62_l1
lease_unpack main63 cpdefer cpdefer2 cpdeferclk cpdefer2clk nostoreclk
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lease_clocks cpdeferclk h64-fixed
lease_clocks cpdefer2clk h64-fixed
# nostoreclk's results are wrong by design (nothing stored), so its run is unverified: lease_clocks' steps with
# --no-verify.
lease_run clk-nostoreclk-h64-fixed nostoreclk 4 60 ./kda-bench --workload h64-fixed --impl cuda-generic --iters 10 \
  --no-verify --stage-clocks /tmp/clk-nostoreclk
cp "$W/clk-nostoreclk-h64-fixed.log" /tmp/clocks/
python3 scripts/stage_clocks.py /tmp/clk-nostoreclk.cuda-generic.h64-fixed | tee /tmp/clocks/stages-nostoreclk-h64-fixed.txt
tar -czf "$OUT/clocks.tgz" -C /tmp clocks
lease_ab main63,cpdefer,cpdefer2 200 h64-fixed h96-fixed
lease_same_figures full main63 cpdefer cpdefer2
lease_checks_done checks
echo "done at $SECONDS s"
date -u
