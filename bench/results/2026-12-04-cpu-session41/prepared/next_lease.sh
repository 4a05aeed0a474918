#!/usr/bin/env bash
# Prepared in session 41 (no device time; never run) for a later session's first device call (~500 s): tcstage (main
# with tc_staging.patch: phase 1 saves the rows' inverse L2 norms and the tame flag, grad_tc stages only its half's
# channels) against main. Checks on tcstage: the backward / stress GPU tests and backward-full whole; then the Python
# package's suite with main's stable-ABI extension on the GPU machine's torch (its first run there: gpu_check.sh's
# python step on the carried .carry/ab/main.tar.xz); then gpu_ab.sh main,tcstage at train-h64-fixed, two rounds.
# Before it, here: git am tc_staging.patch on a branch of main; scripts/gpu_build.sh --python on main and on the branch,
# each archive copied to .carry/ab/NAME.tar.xz with .carry/COMMIT as NAME.COMMIT; .whl with fla-core, einops,
# pytest, numpy (pip download --no-deps -d .whl ...).
# Run as: OUT=$OUT bash .carry/lease/next_lease.sh
#   carry [".carry/lease", ".carry/ab/main.tar.xz", ".carry/ab/tcstage.tar.xz", ".carry/ab/main.COMMIT",
#          ".carry/ab/tcstage.COMMIT", ".whl"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l1
lease_unpack main tcstage
lease_bwd_checks tcstage
lease_checks_done
mkdir -p "$OUT/py"
OUT=$OUT/py timeout 200 bash scripts/gpu_check.sh python; echo "gpu_check python rc=$?"
lease_ab main,tcstage 200 train-h64-fixed
