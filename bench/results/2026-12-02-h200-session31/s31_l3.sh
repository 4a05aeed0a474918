#!/usr/bin/env bash
# Session 31, third device call (~420 s; the session's last ~600 s of device time): the training step through the
# torch op beside FLA in one process (bench_torch.py --part train --workload train-h64-fixed): FLA's chunk_kda
# first (its Triton kernels compile on this fresh machine: session 23 lost FLA's figure to a 240 s limit), then kda
# recomputing and kda with disable_recompute=True (now on the sm_90a path). main = 23954d8's carried extension.
# Run as: OUT=$OUT bash .carry/lease/s31_l3.sh   carry [".carry/lease", ".carry/ab/main.tar.xz", ".whl"].
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l3
lease_unpack main
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
LD_LIBRARY_PATH=/tmp/ab/main KDA_TORCH_LIBRARY=/tmp/ab/main/libkda_torch.so PYTHONPATH="/tmp/site:$PWD/python" \
  timeout 430 python3 scripts/bench_torch.py --part train --workload train-h64-fixed --impl fla --impl kda \
  --impl kda-saved --iters 40 --commit "$(cut -c1-7 .carry/ab/main.COMMIT)" --json "$OUT/peers_train.json" \
  > "$OUT/peers_train.log" 2>&1
echo "bench_torch rc=$?"
grep -hE "median|WRONG|FAILED|Error|/ fla|us" "$OUT/peers_train.log" | head -30
date -u
