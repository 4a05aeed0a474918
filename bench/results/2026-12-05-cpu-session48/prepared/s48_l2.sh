#!/usr/bin/env bash
# Prepared in session 47: kda beside FLA through the PyTorch op in one process each (~500 s + start; FLA's Triton
# autotuning of a fresh machine takes most of it), on main47py (e67af5d, the kernels of 59917a1, built with
# scripts/gpu_build.sh --python):
#   1  the training step at train-h64-fixed (issue #9 criterion 4: FLA, kda with recompute, kda with the forward's
#      saves; step time, peak extra memory, gradient errors), last measured in session 42 (kda-saved 0.747x FLA)
#   2  prefill at h4-32k (issue #6: the few-head workload segsplit made 1.98x faster; FLA never run there)
# Run as: OUT=$OUT bash .carry/lease/s48_l2.sh
# carry [".carry/lease", ".carry/ab/main47py.tar.xz", ".whl", ".carry/ab/main47py.COMMIT"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s48_l2
lease_unpack main47py
lease_torch_train main47py h64-fixed 330
LD_LIBRARY_PATH=/tmp/ab/main47py KDA_TORCH_LIBRARY=/tmp/ab/main47py/libkda_torch.so PYTHONPATH="/tmp/site:$PWD/python" \
  timeout 150 python3 scripts/bench_torch.py --part prefill --workload h4-32k --impl fla --impl kda --iters 50 \
  --commit "$(cut -c1-7 .carry/ab/main47py.COMMIT)" --json "$OUT/peers_prefill_h4-32k.json" > "$OUT/peers_prefill_h4-32k.log" 2>&1
echo "bench_torch prefill h4-32k rc=$?"
grep -hE "^h4|median|WRONG|FAILED|Error|/ fla" "$OUT/peers_prefill_h4-32k.log" | head -12
date -u
