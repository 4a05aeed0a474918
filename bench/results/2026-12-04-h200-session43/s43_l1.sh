#!/usr/bin/env bash
# Prepared in session 42 (compiled, never run) for a later session's first device call (~450 s): tcgate (main with
# tc_gate.patch: grad_tc takes dg through the gate's backward and writes the gate partials; grad_rows reads neither the
# DG tile nor g) against main. Checks on tcgate: the backward / stress GPU tests and backward-full whole (ddt_bias and
# dA_log are among their gradients); then gpu_ab.sh main,tcgate at train-h64-fixed, two rounds, and every launch of one
# step of tcgate under ncu (grad_tc / grad_rows durations).
# Before it, here: git am tc_gate.patch on a branch of main; scripts/gpu_build.sh on main and on the branch (one at a
# time), each archive copied to .carry/ab/NAME.tar.xz with .carry/COMMIT as NAME.COMMIT; `xz -t` each.
# Run as: OUT=$OUT bash .carry/lease/next_lease.sh
#   carry [".carry/lease", ".carry/ab"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l1
lease_unpack main tcgate
lease_bwd_checks tcgate
lease_checks_done
lease_ab main,tcgate 200 train-h64-fixed
lease_ncu_launches tcgate train-h64-fixed 'grad_tc|grad_rows|grad_kernel'
