#!/usr/bin/env bash
# Prepared in session 17 for session 18's second device call (~560 s), after s18_l1_prepared.sh:
#   1. train-h64-fixed, main / wg1 / pp / wgr (gpu_ab, one round): wg1's recompute state pass (predicted backward
#      -150 to -300 us), pp's products kernel (two staging buffers, one barrier a k-slice; predicted -200 to -500 us of
#      its 2.81 ms; bit-identical) and wgr's reverse pass on wgmma (predicted a further -600 to -850 us).
#   2. ncu with source of wg1's state pass at h64-fixed (stall reasons by line: scripts/ncu_stages.py --sass against
#      the archive's state_wgmma.sm_90a.cubin).
#   3. kda (BUILD: main, or wg1 if call 1 kept it) beside FLA on the six prefill workloads in one process (issue #3
#      criterion 4), FLA's compile from the carried Triton cache (.carry/triton.tgz, 20 MB, session 17's train run:
#      it holds the h64-fixed shapes; the others compile).
# Run as: BUILD=wg1 OUT=$OUT bash .carry/lease/s18_l2_prepared.sh   with carry [".carry/lease", ".carry/ab", ".whl",
# ".carry/triton.tgz"].
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l2.log") 2>&1
BUILD=${BUILD:-main}
date -u
OUT=$OUT timeout 220 bash scripts/gpu_ab.sh --builds main,wg1,pp,wgr --impl cuda-generic --rounds 1 --workload train-h64-fixed
echo "gpu_ab rc=$?"
date -u
OUT=$OUT timeout 100 bash scripts/gpu_ab.sh --builds wg1 --impl cuda-generic --rounds 0 --ncu state_wgmma \
  --ncu-count 1 --workload h64-fixed
echo "gpu_ab ncu rc=$?"
date -u
mkdir -p /tmp/ab/$BUILD && tar -xJf .carry/ab/$BUILD.tar.xz -C /tmp/ab/$BUILD
export TRITON_CACHE_DIR=/tmp/kda-triton-cache; mkdir -p $TRITON_CACHE_DIR
[ -f .carry/triton.tgz ] && tar -xzf .carry/triton.tgz -C /tmp
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
PYTHONUNBUFFERED=1 KDA_TORCH_LIBRARY=/tmp/ab/$BUILD/libkda_torch.so PYTHONPATH="/tmp/site:$PWD/python" timeout 200 \
  python3 scripts/bench_torch.py --part prefill --commit "$(cat .carry/ab/$BUILD.COMMIT)" --json "$OUT/peers_prefill.json" \
  > "$OUT/peers_prefill.log" 2>&1; echo "prefill rc=$?"
grep -h -E "median|WRONG|FAILED|Error| / |floor" "$OUT/peers_prefill.log" | head -40
date -u
