#!/usr/bin/env bash
# Session 43, call 2: tcgate2 (tcgate with dg stored a row at a time from shared memory) checked (backward / stress
# GPU tests, backward-full; beside them the Python package's CUDA tests with FLA's KDA layer on its extension), then
# gpu_ab.sh main,tcgate2 at train-h64-fixed (two rounds), then ncu's full set with source of one grad_tc launch
# of main and of tcgate2 (call 1: grad_tc +0.16 ms, grad_rows -0.17 ms under ncu: where grad_tc's time went).
# Run as: OUT=$OUT bash .carry/lease/s43_l2.sh        carry [".carry/lease", ".carry/ab", ".whl"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l2
lease_unpack main tcgate2
lease_py_tests tcgate2 230 "cuda or fla_layer" > "$W/py.txt" &  # its summary printed after the checks
pypid=$!
lease_bwd_checks tcgate2
wait $pypid
cat "$W/py.txt"
lease_checks_done
lease_ab main,tcgate2 200 train-h64-fixed
OUT=$OUT timeout 200 bash scripts/gpu_ab.sh --builds main,tcgate2 --rounds 0 --ncu-count 1 --ncu 'grad_tc' \
  --workload train-h64-fixed
echo "ncu rc=$?"
date -u
