#!/usr/bin/env bash
# Prepared in session 18 for session 19's second call (~540 s): train-h64-fixed A/B of main, stg2, stgov, stgnb (the
# backward's recompute runs the same state kernel), then kda (BUILD, default stgov: set it to call 1's winner) beside
# FLA for the six prefill workloads in one process, with Triton's cache handed back in 15 MB parts (FLA's varlen
# shapes compiled past the time limit in sessions 16 and 18).
# Run as: BUILD=stgov OUT=$OUT bash .carry/lease/s19_l2_prepared.sh   with carry [".carry/lease", ".carry/ab", ".whl",
# ".carry/triton.tgz"].
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l2.log") 2>&1
BUILD=${BUILD:-stgov}
date -u
OUT=$OUT timeout 230 bash scripts/gpu_ab.sh --builds main,stg2,stgov,stgnb --impl cuda-generic --rounds 1 \
  --workload train-h64-fixed
echo "gpu_ab train rc=$?"
date -u
mkdir -p /tmp/ab/$BUILD && tar -xJf .carry/ab/$BUILD.tar.xz -C /tmp/ab/$BUILD
export TRITON_CACHE_DIR=/tmp/kda-triton-cache; mkdir -p $TRITON_CACHE_DIR
[ -f .carry/triton.tgz ] && tar -xzf .carry/triton.tgz -C /tmp
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
PYTHONUNBUFFERED=1 KDA_TORCH_LIBRARY=/tmp/ab/$BUILD/libkda_torch.so PYTHONPATH="/tmp/site:$PWD/python" timeout 280 \
  python3 scripts/bench_torch.py --part prefill --commit "$(cat .carry/ab/$BUILD.COMMIT)" --json "$OUT/peers_prefill.json" \
  > "$OUT/peers_prefill.log" 2>&1; echo "prefill rc=$?"
grep -h -E "median|WRONG|FAILED|Error| / |floor" "$OUT/peers_prefill.log" | head -40
(cd /tmp && timeout 40 tar -czf - kda-triton-cache | split -b 15M -d - "$OUT/triton.tgz.part-")
date -u
