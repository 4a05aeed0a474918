#!/usr/bin/env bash
# Session 17, call 2 (~540 s): call 1 measured statecl and s5w slower than main (state pass 0.74 -> 1.36 ms), so
#   1. kda (main 8118d2b) beside FLA on train-h64-fixed in one process (issue #9's ratio; session 16's FLA backward
#      did not compile in 190 s, so 330 s here), then Triton's cache back in <= 15 MiB parts for later sessions;
#   2. ncu, full set with source, of the state pass on main and statecl at h64-fixed: why the cluster form lost, and
#      what holds main's at 0.44 eligible warps a scheduler (read with scripts/ncu_stages.py --sass).
# Run as: OUT=$OUT bash .carry/lease/s17_l2.sh   with carry [".carry/lease", ".carry/ab", ".whl", ".carry/triton.tgz"].
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l2.log") 2>&1
date -u
mkdir -p /tmp/ab/main && tar -xJf .carry/ab/main.tar.xz -C /tmp/ab/main
export TRITON_CACHE_DIR=/tmp/kda-triton-cache; mkdir -p $TRITON_CACHE_DIR
[ -f .carry/triton.tgz ] && tar -xzf .carry/triton.tgz -C /tmp
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
PYTHONUNBUFFERED=1 KDA_TORCH_LIBRARY=/tmp/ab/main/libkda_torch.so PYTHONPATH="/tmp/site:$PWD/python" timeout 330 \
  python3 scripts/bench_torch.py --part train --workload train-h64-fixed --iters 40 --commit "$(cat .carry/ab/main.COMMIT)" \
  --json "$OUT/peers_train.json" > "$OUT/peers_train.log" 2>&1; echo "train rc=$?"
grep -h -E "median|WRONG|FAILED|Error| / |floor|peak" "$OUT/peers_train.log" | head -40
date -u
(cd /tmp && timeout 40 tar -czf - kda-triton-cache | split -b 15M -d - "$OUT/triton.tgz.part-")
date -u
OUT=$OUT timeout 170 bash scripts/gpu_ab.sh --builds main,statecl --impl cuda-generic --rounds 0 --ncu state_kernel \
  --ncu-count 1 --workload h64-fixed
echo "gpu_ab rc=$?"
ls -la "$OUT"
date -u
