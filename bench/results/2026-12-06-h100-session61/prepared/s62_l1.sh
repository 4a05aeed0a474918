#!/usr/bin/env bash
# Prepared in session 61 for the next session's first call (not run: the budget was spent). Builds
# (scripts/gpu_build.sh; if .carry was lost, rebuild them: main63 = --ab main63 on main, cpdefer = `git am
# prepared/cpdefer.patch` on a branch from main, then --ab cpdefer and --stage-clocks --ab cpdeferclk):
#   main63      main's kernels (d12886f)
#   cpdefer     S5c's [W | U] bulk copies issued in the next task's S0 once its rows are staged, not beside its row
#               loads (the same bits by construction); cpdeferclk its measuring build
# halfclk (session 61, call 3) left S0's ~5 K-cycle wait for its rows in place on half the SMs, so the wait is not
# DRAM's bandwidth; this asks whether it is the copies leaving the SM beside the loads.
# 1  gpu_ab main63 / cpdefer at h64-fixed and h96-fixed, 2 rounds, every run verified against the fp64 oracle
# 2  stage clocks of cpdeferclk at h64-fixed (session 61's call 1 has s0cpkclk's: main63's kernels with the stamps)
# 3  full on cpdefer if time is left
# Run as OUT=$OUT bash .carry/lease/s62_l1.sh with .carry/slim.sh on, carry [".carry/lease", ".carry/ab/main63.tar.xz",
# ".carry/ab/main63.COMMIT", ".carry/ab/cpdefer.tar.xz", ".carry/ab/cpdefer.COMMIT", ".carry/ab/cpdeferclk.tar.xz",
# ".carry/ab/cpdeferclk.COMMIT"]; ~90-160 s.
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s62_l1
lease_unpack main63 cpdefer cpdeferclk
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lease_clocks cpdeferclk h64-fixed
lease_ab main63,cpdefer 150 h64-fixed h96-fixed
lease_run full-cpdefer cpdefer 8 90 ./kda-verify --suite full --impl cuda-generic
lease_checks_done checks
echo "done at $SECONDS s"
date -u
