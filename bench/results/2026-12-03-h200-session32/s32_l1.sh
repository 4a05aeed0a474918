#!/usr/bin/env bash
# Session 32, first device call (~500 s): main = 9657eae's carried extension (the torch op's chunk_bwd after a
# saving forward now runs the forward's backend, HOPPER, not a forced CHUNKED) through the torch op beside FLA, one
# process per part: the training step (fla, kda recomputing, kda with disable_recompute=True), decode (H = 32 and
# 12, B = 1 .. 512, fp32 value-first pool), then the six prefill workloads. pytest's disable_recompute cases first.
# Run as: OUT=$OUT bash .carry/lease/s32_l1.sh
#   carry [".carry/lease", ".carry/ab/main.tar.xz", ".carry/ab/main.COMMIT", ".whl"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l1
lease_unpack main
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
commit=$(cut -c1-7 .carry/ab/main.COMMIT)
echo "main = $commit"
export LD_LIBRARY_PATH=/tmp/ab/main KDA_TORCH_LIBRARY=/tmp/ab/main/libkda_torch.so
export PYTHONPATH="/tmp/site:$PWD/python"
timeout 90 python3 -m pytest -q -x python/tests/test_ops.py -k "disable_recompute" > "$OUT/pytest_saved.log" 2>&1
echo "pytest disable_recompute rc=$?"; tail -3 "$OUT/pytest_saved.log"
for part in train decode prefill; do
  case $part in
    train) wl=(--workload train-h64-fixed --impl kda-saved --iters 40); lim=240 ;;
    decode) wl=(--iters 200); lim=120 ;;
    prefill) wl=(--iters 100); lim=150 ;;
  esac
  timeout $lim python3 scripts/bench_torch.py --part $part --impl fla --impl kda "${wl[@]}" --commit "$commit" \
    --json "$OUT/peers_$part.json" > "$OUT/peers_$part.log" 2>&1
  echo "bench_torch $part rc=$?"
  grep -hE "median|WRONG|FAILED|Error|/ fla| us" "$OUT/peers_$part.log" | head -40
done
date -u
