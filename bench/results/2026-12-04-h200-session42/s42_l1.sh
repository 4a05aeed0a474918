#!/usr/bin/env bash
# Session 42, call 1: tcstage (session 41's prepared grad_tc staging patch) checked whole (backward / stress GPU tests,
# backward-full), with the Python package's CUDA tests on main's stable-ABI extension beside it (the first GPU run of that
# extension; correctness only, so the two share the machine); then, alone on the GPU, gpu_ab.sh main,tcstage,tcepi at
# train-h64-fixed (tcepi = tcstage + the epilogue's next n8 tile loaded before this one's stores).
# Run as: OUT=$OUT bash .carry/lease/s42_l1.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l1
builds=main,tcstage
[ -f .carry/ab/tcepi.tar.xz ] && builds=$builds,tcepi
lease_unpack ${builds//,/ }
mkdir -p "$OUT/py"
# As gpu_check.sh's python step, on the CUDA tests (-k cuda or fla_layer: the rest ran in CI), logging as it goes.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
cp /tmp/ab/main/libkda_jax.so python/kda/ 2>/dev/null
( LD_LIBRARY_PATH=/tmp/ab/main KDA_TORCH_LIBRARY=/tmp/ab/main/libkda_torch.so PYTHONPATH="/tmp/site:$PWD/python" \
    XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 230 python3 -m pytest -q -rs -p no:cacheprovider python/tests \
    -k "cuda or fla_layer" > "$OUT/py/python_tests.log" 2>&1; echo "python tests rc=$?" ) &
pypid=$!
lease_bwd_checks tcstage
wait $pypid
grep -E "passed|failed|FAILED|SKIPPED|Error" "$OUT/py/python_tests.log" | head -30
lease_checks_done
lease_ab "$builds" 280 train-h64-fixed
