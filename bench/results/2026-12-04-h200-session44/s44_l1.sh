#!/usr/bin/env bash
# Prepared in session 43 (not run: the session's device time went to the four calls in the ledger) for a later
# session's first device call (~330 s): tcrowptr (main with prepared/0001-*.patch and 0002-*.patch: grad_tc's staging
# forms the row offsets once and steps them 8 tokens a row, activates beta once a warp, takes the workspace layout from
# the host, copies dM / dA with one destination offset; the sm_90a bf16 bounded-gate kernel's SASS 5192 -> 4344
# instructions, nearly all of the difference in code a warp runs once: ~-0.12 G of its ~0.70 G warp instructions,
# 128 registers, no spill)
# against main. Checks on tcrowptr: the backward / stress GPU tests and backward-full whole; then gpu_ab.sh
# main,tcrowptr at train-h64-fixed, two rounds, and ncu's full set with source of one grad_tc launch of each.
# Before it, here: git am the patch on a branch of main (from main's checkout: copy this script from main, not from a
# branch, whose copy may be older: session 43's call 1); scripts/gpu_build.sh --python on main and on the branch, one
# at a time, each archive to .carry/ab/NAME.tar.xz with its commit as NAME.COMMIT (written after the build finishes:
# switch branches only then), `xz -t` each.
# Run as: OUT=$OUT bash .carry/lease/next_lease.sh        carry [".carry/lease", ".carry/ab"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l1
lease_unpack main tcrowptr
lease_bwd_checks tcrowptr
lease_checks_done
lease_ab main,tcrowptr 200 train-h64-fixed
OUT=$OUT timeout 150 bash scripts/gpu_ab.sh --builds main,tcrowptr --rounds 0 --ncu-count 1 --ncu 'grad_tc' \
  --workload train-h64-fixed
echo "ncu rc=$?"
date -u
