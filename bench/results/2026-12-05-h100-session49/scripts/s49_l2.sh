#!/usr/bin/env bash
# Session 49, call 1 (~560 s): on main49py (main 70d0206: the kernels of 74290b6, rv5 and aqk3 in, built with
# scripts/gpu_build.sh --python), through the PyTorch op beside FLA in one process each:
#   1  issue #7 criterion 4's fusions part (kda's decode fusions against the same conv / gated norm composed around
#      the call in eager PyTorch and as FLA's Triton kernels), ~90 s on a fresh machine
#   2  issue #9 criterion 4's training step at train-h64-fixed and train-h96-fixed (FLA, kda with recompute, kda with
#      the forward's saves: step time, peak extra memory, gradient errors)
# Run as: OUT=$OUT bash .carry/lease/s49_l2.sh
# carry [".carry/lease", ".carry/ab/main49py.tar.xz", ".whl", ".carry/ab/main49py.COMMIT"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s49_l2
lease_unpack main49py
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
c=$(cut -c1-7 .carry/ab/main49py.COMMIT)
LD_LIBRARY_PATH=/tmp/ab/main49py KDA_TORCH_LIBRARY=/tmp/ab/main49py/libkda_torch.so PYTHONPATH="/tmp/site:$PWD/python" \
  timeout 150 python3 scripts/bench_torch.py --part fusions --impl kda --impl fla --iters 50 --commit "$c" \
  --json "$OUT/fusions.json" > "$OUT/fusions.log" 2>&1
echo "bench_torch fusions rc=$?"
grep -hE "^fusions|median|saved|WRONG|Error" "$OUT/fusions.log" | head -30
date -u
LD_LIBRARY_PATH=/tmp/ab/main49py KDA_TORCH_LIBRARY=/tmp/ab/main49py/libkda_torch.so PYTHONPATH="/tmp/site:$PWD/python" \
  timeout 390 python3 scripts/bench_torch.py --part train --workload train-h64-fixed --workload train-h96-fixed \
  --impl fla --impl kda --impl kda-saved --iters 20 --commit "$c" --json "$OUT/peers_train_fixed.json" \
  > "$OUT/peers_train_fixed.log" 2>&1
echo "bench_torch train (fixed) rc=$?"
grep -hE "^train|median|WRONG|FAILED|Error|/ fla" "$OUT/peers_train_fixed.log" | head -30
date -u
