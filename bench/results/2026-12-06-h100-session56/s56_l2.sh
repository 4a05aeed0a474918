#!/usr/bin/env bash
# Queued in session 55: issues #6 and #9 beside FLA with BUILD's libkda_torch.so, FLA's Triton cache carried and handed
# back (lease_triton_cache / lease_triton_save: session 55's prefill run spent its 420 s limit with FLA compiling and
# reached four of the seven workloads).
#   1  bench_torch.py --part prefill --impl kda --impl fla --iters 100 (the seven prefill workloads)
#   2  lease_torch_train BUILD h64-fixed (kda, kda-saved and FLA's training step) in what is left of 560 s
# Run as: OUT=$OUT bash .carry/lease/s56_l2.sh BUILD
# carry [".carry/lease", ".whl", ".carry/ab/BUILD.tar.xz", ".carry/ab/BUILD.COMMIT"] (and .carry/triton.tar.gz once a
# call has handed one back)
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
b=$1
lease_begin s56_l2
lease_unpack "$b"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lease_triton_cache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
commit=$(cut -c1-7 ".carry/ab/$b.COMMIT")
LD_LIBRARY_PATH="/tmp/ab/$b" KDA_TORCH_LIBRARY="/tmp/ab/$b/libkda_torch.so" PYTHONPATH="/tmp/site:$PWD/python" \
  timeout 400 python3 scripts/bench_torch.py --part prefill --impl kda --impl fla --iters 100 --commit "$commit" \
  --json "$OUT/prefill.json" > "$OUT/prefill.log" 2>&1
echo "bench_torch prefill rc=$?"
grep -hE "median|WRONG|FAILED|Error| / " "$OUT/prefill.log" | head -40
lease_triton_save
date -u
left=$((560 - SECONDS))
if [ $left -gt 120 ]; then lease_torch_train "$b" h64-fixed $left; lease_triton_save; else echo "no time for training"; fi
