#!/usr/bin/env bash
# Session 14 call 3: the row-split decode kernel as committed (3-D grid, no division ahead of the slot's load; the
# dispatcher takes it up to 128 warps per SM), its bulk-kernel A/B in one process (cuda-hopper now timed on the device),
# and kda beside FLA (decode, then the six prefill workloads with FLA's triton cache from call 2).
# carry .carry/lease .carry/ab .whl .carry/triton.tar.xz: rows2 = the committed state (torch extension), rowsall =
# call 2's measurement build (flat task index, rows kernel everywhere).
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$(date +%s)
exec > >(tee "$OUT/l3.log") 2>&1
date -u
for b in rows2 rowsall; do mkdir -p /tmp/ab/$b && tar -xJf .carry/ab/$b.tar.xz -C /tmp/ab/$b; done
W=$(mktemp -d)
run() {  # name build timeout cmd...
  local n=$1 b=$2 t=$3; shift 3
  ( cd /tmp/ab/$b && OMP_NUM_THREADS=8 LD_LIBRARY_PATH=. timeout "$t" "$@" > "$W/$n.log" 2>&1; echo "== $n rc=$? $(tail -n 1 "$W/$n.log")" )
}
SD=1862009593585421415
pids=()
run tests-dec-rows2 rows2 200 ./kda_gpu_tests --gtest_filter='*Decode*' & pids+=($!)
run verify-dec-rows2 rows2 150 ./kda-verify --suite decode-full --impl cuda-generic --seed $SD & pids+=($!)
wait "${pids[@]}"
grep -hE 'FAIL|Failure' "$W"/*.log | head -20
(cd "$W" && tar -cf "$OUT/checks.tar" .)
date -u
DW=$(for h in 32 12; do for b in 1 8 32 128 256 512; do echo --workload decode-h$h-b$b; done; done)
echo "== decode, one process: cuda-generic (the dispatcher) and cuda-hopper (the bulk kernel forced)"
(cd /tmp/ab/rows2 && LD_LIBRARY_PATH=. timeout 120 ./kda-bench --commit rows2 --impl cuda-generic --impl cuda-hopper \
  --iters 200 $DW --json "$W/decode-rows2.json" > "$W/decode-rows2.log" 2>&1; echo "rc=$?")
grep -E "^decode|median" "$W/decode-rows2.log" | sed 's/ (seed.*//; s/(min.*sets)//'
echo "== decode, call 2's rows kernel (flat task index) at B = 1 and 8"
(cd /tmp/ab/rowsall && LD_LIBRARY_PATH=. timeout 60 ./kda-bench --commit rowsall --impl cuda-generic --iters 200 \
  --workload decode-h32-b1 --workload decode-h12-b1 --workload decode-h32-b8 --workload decode-h12-b8 \
  --json "$W/decode-rowsall.json" > "$W/decode-rowsall.log" 2>&1; echo "rc=$?")
grep -E "^decode|median" "$W/decode-rowsall.log" | sed 's/ (seed.*//; s/(min.*sets)//'
(cd "$W" && tar -cf "$OUT/decode.tar" decode-*.json decode-*.log)
date -u
echo "== kda (rows2) and FLA side by side: decode, then prefill"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export TRITON_CACHE_DIR=/tmp/kda-triton-cache PYTHONUNBUFFERED=1
mkdir -p $TRITON_CACHE_DIR && tar -xJf .carry/triton.tar.xz -C $TRITON_CACHE_DIR
for part in decode prefill; do
  KDA_TORCH_LIBRARY=/tmp/ab/rows2/libkda_torch.so LD_LIBRARY_PATH=/tmp/ab/rows2 PYTHONPATH="/tmp/site:$PWD/python" \
    timeout $([ $part = decode ] && echo 100 || echo $(( 545 - $(date +%s) + T0 ))) python3 scripts/bench_torch.py --part $part --commit rows2 \
    --json "$W/peers_$part.json" > "$W/peers_$part.log" 2>&1
  echo "$part rc=$?"
  grep -h -E "^[a-z0-9-]+:|median|WRONG|FAILED|Error| / " "$W/peers_$part.log" | cut -c1-200
  (cd "$W" && tar -rf "$OUT/peers.tar" peers_$part.json peers_$part.log)
  date -u
done
