#!/usr/bin/env bash
# Prepared in session 48 (no device that session): first issue #7 criterion 4's fusions part (kda's decode fusions
# against the same conv / gated norm composed around the call in eager PyTorch and with FLA's Triton kernels; ~90 s),
# then issue #9 criterion 4's other five training workloads beside FLA through the PyTorch op in one process (FLA,
# kda with recompute, kda with the forward's saves; step time, peak extra memory, gradient errors), on main47py (e67af5d, the kernels of 59917a1, scripts/gpu_build.sh --python). Best run
# right after s48_l2 on the same warm machine (FLA's Triton cache then holds most kernels; a fresh one needs ~300 s).
# Run as: OUT=$OUT bash .carry/lease/s48_l3.sh
# carry [".carry/lease", ".carry/ab/main47py.tar.xz", ".whl", ".carry/ab/main47py.COMMIT"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s48_l3
lease_unpack main47py
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
LD_LIBRARY_PATH=/tmp/ab/main47py KDA_TORCH_LIBRARY=/tmp/ab/main47py/libkda_torch.so PYTHONPATH="/tmp/site:$PWD/python" \
  timeout 200 python3 scripts/bench_torch.py --part fusions --impl kda --impl fla --iters 50 --commit "$(cut -c1-7 .carry/ab/main47py.COMMIT)" \
  --json "$OUT/fusions.json" > "$OUT/fusions.log" 2>&1
echo "bench_torch fusions rc=$?"
grep -hE "^fusions|median|saved|WRONG|Error" "$OUT/fusions.log" | head -30
wl=()
for w in h96-fixed h96-mixed h96-uniform h64-mixed h64-uniform; do wl+=(--workload "train-$w"); done
LD_LIBRARY_PATH=/tmp/ab/main47py KDA_TORCH_LIBRARY=/tmp/ab/main47py/libkda_torch.so PYTHONPATH="/tmp/site:$PWD/python" \
  timeout 420 python3 scripts/bench_torch.py --part train "${wl[@]}" --impl fla --impl kda --impl kda-saved \
  --iters 20 --commit "$(cut -c1-7 .carry/ab/main47py.COMMIT)" --json "$OUT/peers_train_five.json" \
  > "$OUT/peers_train_five.log" 2>&1
echo "bench_torch train (five workloads) rc=$?"
grep -hE "^train|median|WRONG|FAILED|Error|/ fla" "$OUT/peers_train_five.log" | head -40
date -u
