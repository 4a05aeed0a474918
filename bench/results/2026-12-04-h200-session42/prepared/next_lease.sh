#!/usr/bin/env bash
# Prepared in session 42 (never run) for a later session's first device call (~400 s): tcgate (main with tc_gate.patch:
# grad_tc takes dg through the gate's backward and writes the gate partials; grad_rows reads neither the DG tile nor g)
# against main. Checks on tcgate: the backward / stress GPU tests and backward-full whole (ddt_bias and dA_log are
# among their gradients); beside them the Python package's CUDA tests on tcgate's extension, FLA's KDA layer test
# included (it skipped in session 42: fla-core has no fla.layers, flash-linear-attention has); then gpu_ab.sh
# main,tcgate at train-h64-fixed, two rounds, and every gradient launch of one step of tcgate under ncu.
# Before it, here: git am tc_gate.patch on a branch of main; scripts/gpu_build.sh --python on main and on the branch
# (one at a time), each archive copied to .carry/ab/NAME.tar.xz with .carry/COMMIT as NAME.COMMIT, `xz -t` each;
# .whl: pip download --no-deps for Python 3.12 of fla-core==0.6.0, flash-linear-attention==0.6.0, einops, pytest,
# iniconfig, pluggy, packaging, pygments (not numpy: the image has it, and its wheel would pass the 64 MiB a call).
# Run as: OUT=$OUT bash .carry/lease/next_lease.sh        carry [".carry/lease", ".carry/ab", ".whl"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l1
lease_unpack main tcgate
lease_py_tests tcgate 230 "cuda or fla_layer" > "$W/py.txt" &  # its summary printed after the checks
pypid=$!
lease_bwd_checks tcgate
wait $pypid
cat "$W/py.txt"
lease_checks_done
lease_ab main,tcgate 200 train-h64-fixed
lease_ncu_launches tcgate train-h64-fixed 'grad_tc|grad_rows|grad_kernel'
