#!/usr/bin/env bash
# Session 32, second device call (~450 s): call 1's training part again, alone (FLA's Triton compile of its backward
# took call 1's 240 s limit): bench_torch.py --part train --workload train-h64-fixed, fla / kda / kda-saved in one
# process, main = 9657eae's carried extension.
# Run as: OUT=$OUT bash .carry/lease/s32_l2.sh
#   carry [".carry/lease", ".carry/ab/main.tar.xz", ".carry/ab/main.COMMIT", ".whl"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l2
lease_unpack main
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
commit=$(cut -c1-7 .carry/ab/main.COMMIT)
echo "main = $commit"
LD_LIBRARY_PATH=/tmp/ab/main KDA_TORCH_LIBRARY=/tmp/ab/main/libkda_torch.so PYTHONPATH="/tmp/site:$PWD/python" \
  timeout 470 python3 scripts/bench_torch.py --part train --workload train-h64-fixed --impl fla --impl kda \
  --impl kda-saved --iters 40 --commit "$commit" --json "$OUT/peers_train.json" > "$OUT/peers_train.log" 2>&1
echo "bench_torch train rc=$?"
grep -hE "median|WRONG|FAILED|Error|/ fla| us" "$OUT/peers_train.log" | head -30
date -u
