#!/usr/bin/env bash
# Session 23's fourth device call (~500 s). diagacc (ed188b5, diagnostic): the factored diagonal blocks back in a
# backward, each k-step's 3xTF32 products into fresh accumulators summed in fp32: does the near-identical probe pass
# (the tensor cores' accumulation over 48 mma the cause) or fail as 5f9980a (the factors' rounding)? If it passes at
# both seeds and a fresh one, call 5 (s23_l5.sh) runs backward-full whole and the A/B against fix2. t23b (main's kernels +
# 55d8407's GPU test at T = 4096): that test should fail; fix2 (main at 55d8407 + docs, with the torch op): the backward
# GPU tests, then the training step beside FLA in one process (bench_torch.py --part train).
# Run as: OUT=$OUT bash .carry/lease/s23_l4.sh   with carry [".carry/lease", ".carry/ab", ".whl"].
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l4
lease_unpack diagacc t23b fix2
V=(./kda-verify --impl cuda-generic)
NI=(--suite backward-full --filter near_identical_keys_beta_at_2)
pids=()
lease_run da-s1 diagacc 1 200 "${V[@]}" "${NI[@]}" --seed 14329222173504304775 & pids+=($!)
lease_run da-s2 diagacc 1 200 "${V[@]}" "${NI[@]}" --seed 2902554903083653309 & pids+=($!)
lease_run da-s3 diagacc 1 200 "${V[@]}" "${NI[@]}" & pids+=($!)
lease_run tests-t23b t23b 2 220 ./kda_gpu_tests --gtest_filter='Stress/*' & pids+=($!)
lease_run tests fix2 3 220 ./kda_gpu_tests --gtest_filter='*Backward*' & pids+=($!)
wait "${pids[@]}"  # never a bare wait (the tee above)
grep -hE "near_identical" "$W"/da-*.log | cut -c1-200
grep -hE "^\[  (FAILED|PASSED) |tests? ran|    d[qkv] " "$W"/tests*.log | head -40
lease_checks_done
# FLA and kda's torch op in one process: the training step (FLA's Triton kernels compile here: no cache carried).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export TRITON_CACHE_DIR=/tmp/kda-triton-cache
PYTHONUNBUFFERED=1 KDA_TORCH_LIBRARY=/tmp/ab/fix2/libkda_torch.so PYTHONPATH="/tmp/site:$PWD/python" timeout 240 \
  python3 scripts/bench_torch.py --part train --workload train-h64-fixed --commit "$(cat .carry/ab/fix2.COMMIT)" \
  --json "$OUT/peers_train.json" > "$OUT/peers_train.log" 2>&1
echo "train rc=$?"; grep -hE "median|WRONG|FAILED|Error| / " "$OUT/peers_train.log" | head -20; date -u
date -u
