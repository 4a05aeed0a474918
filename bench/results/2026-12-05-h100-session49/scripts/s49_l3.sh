#!/usr/bin/env bash
# Session 49, call 2 (~500 s), right after s49_l2 on the same warm machine (FLA's Triton cache then holds most of its
# kernels): issue #9 criterion 4's training step at the other four standard workloads beside FLA in one process, on
# main49py (main 70d0206, the kernels of 74290b6).
# Run as: OUT=$OUT bash .carry/lease/s49_l3.sh
# carry [".carry/lease", ".carry/ab/main49py.tar.xz", ".whl", ".carry/ab/main49py.COMMIT"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s49_l3
lease_unpack main49py
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
c=$(cut -c1-7 .carry/ab/main49py.COMMIT)
wl=()
for w in h96-mixed h96-uniform h64-mixed h64-uniform; do wl+=(--workload "train-$w"); done
LD_LIBRARY_PATH=/tmp/ab/main49py KDA_TORCH_LIBRARY=/tmp/ab/main49py/libkda_torch.so PYTHONPATH="/tmp/site:$PWD/python" \
  timeout 540 python3 scripts/bench_torch.py --part train "${wl[@]}" --impl fla --impl kda --impl kda-saved \
  --iters 20 --commit "$c" --json "$OUT/peers_train_four.json" > "$OUT/peers_train_four.log" 2>&1
echo "bench_torch train (four workloads) rc=$?"
grep -hE "^train|median|WRONG|FAILED|Error|/ fla" "$OUT/peers_train_four.log" | head -40
date -u
