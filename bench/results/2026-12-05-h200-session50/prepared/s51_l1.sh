#!/usr/bin/env bash
# Prepared in session 49, queued again in session 50 (not run: the device budget went to refused tries): on mainpy (main as the next session finds it, built with
# `scripts/gpu_build.sh --python --ab mainpy` (this machine loses .carry between sessions)), through the PyTorch op beside FLA, Triton's cache handed back as $OUT/triton.tar.gz after each step
# (carry it as .carry/triton.tar.gz next time: FLA's compile and autotuning are then paid once):
#   1  issue #7 criterion 4's fusions part with each fusion alone against FLA's kernel for the other part
#      (conv-fused-fla, norm-fused-fla: new in session 49; ~75 s cold)
#   2  issue #9 criterion 4's training step at train-h64-mixed (s51_train.sh's step; ~330 s cold)
# Then s51_train.sh for the other three, carrying the cache this call hands back.
# Run as: OUT=$OUT bash .carry/lease/s51_l1.sh
# carry [".carry/lease", ".carry/ab/mainpy.tar.xz", ".whl", ".carry/ab/mainpy.COMMIT"] (+ ".carry/triton.tar.gz")
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s51_l1
lease_unpack mainpy
lease_triton_cache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
LD_LIBRARY_PATH=/tmp/ab/mainpy KDA_TORCH_LIBRARY=/tmp/ab/mainpy/libkda_torch.so PYTHONPATH="/tmp/site:$PWD/python" \
  timeout 120 python3 scripts/bench_torch.py --part fusions --impl kda --impl fla --iters 50 \
  --commit "$(cut -c1-7 .carry/ab/mainpy.COMMIT)" --json "$OUT/fusions.json" > "$OUT/fusions.log" 2>&1
echo "bench_torch fusions rc=$?"
grep -hE "^fusions|median|saved|WRONG|Error" "$OUT/fusions.log" | head -40
lease_triton_save
for w in h64-mixed; do
  lease_torch_train mainpy "$w" 420
  lease_triton_save
done
date -u
