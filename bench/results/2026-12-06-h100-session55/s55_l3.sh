#!/usr/bin/env bash
# Session 55, call 3: issue #6 beside FLA: scripts/bench_torch.py --part prefill (kda and FLA in one process, the same
# inputs, each verified, then 100 timed iterations) with BUILD's libkda_torch.so; session 51's last such run was on an
# H100 before p1loop (0.805-0.842x FLA).
# Run as: OUT=$OUT bash .carry/lease/s55_l3.sh BUILD   carry [".carry/lease", ".whl", ".carry/ab/BUILD.tar.xz",
#         ".carry/ab/BUILD.COMMIT"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
b=$1
lease_begin s55_l3
lease_unpack "$b"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
commit=$(cut -c1-7 ".carry/ab/$b.COMMIT")
LD_LIBRARY_PATH="/tmp/ab/$b" KDA_TORCH_LIBRARY="/tmp/ab/$b/libkda_torch.so" PYTHONPATH="/tmp/site:$PWD/python" \
  timeout 420 python3 scripts/bench_torch.py --part prefill --impl kda --impl fla --iters 100 --commit "$commit" \
  --json "$OUT/prefill.json" > "$OUT/prefill.log" 2>&1
echo "bench_torch prefill rc=$?"
grep -hE "median|WRONG|FAILED|Error| / " "$OUT/prefill.log" | head -40
date -u
