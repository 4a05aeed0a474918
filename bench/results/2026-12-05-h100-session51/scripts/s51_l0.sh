#!/usr/bin/env bash
# Session 51, call 1: aqk2's h96-fixed timing (session 50 timed h64-fixed only: gpu_ab main50,aqk2, 2 rounds), then
# s51_l1.sh's steps (issue #7 criterion 4's fusions with conv-fused-fla / norm-fused-fla; issue #9 criterion 4's
# training step at train-h64-mixed) under what is left of a 590 s call. Triton's cache goes back as $OUT/triton.tar.gz.
# Run as: OUT=$OUT bash .carry/lease/s51_l0.sh
# The torch runs use aqk2 (90f6de6): its src / include / python equal main 813b4fa's but for the CPU forward (FTZ).
# carry [".carry/lease", ".carry/ab/main50.tar.xz", ".carry/ab/aqk2.tar.xz", ".whl", ".carry/ab/main50.COMMIT", ".carry/ab/aqk2.COMMIT"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s51_l0
lease_unpack main50 aqk2
lease_triton_cache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lease_ab main50,aqk2 110 h96-fixed
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
LD_LIBRARY_PATH=/tmp/ab/aqk2 KDA_TORCH_LIBRARY=/tmp/ab/aqk2/libkda_torch.so PYTHONPATH="/tmp/site:$PWD/python" \
  timeout 120 python3 scripts/bench_torch.py --part fusions --impl kda --impl fla --iters 50 \
  --commit "$(cut -c1-7 .carry/ab/aqk2.COMMIT)" --json "$OUT/fusions.json" > "$OUT/fusions.log" 2>&1
echo "bench_torch fusions rc=$?"
grep -hE "^fusions|median|saved|WRONG|Error" "$OUT/fusions.log" | head -40
lease_triton_save
left=$((575 - SECONDS))
echo "train-h64-mixed limit ${left} s"
[ "$left" -gt 60 ] && lease_torch_train aqk2 h64-mixed "$left"
lease_triton_save
date -u
