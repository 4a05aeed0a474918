#!/usr/bin/env bash
# Session 14 call 2: the row-split small-batch decode kernel (generic/decode_rows.cu), and kda beside FLA in one
# process. carry .carry/lease .carry/ab .whl: rows = 85fffdf + the rows kernel (dispatcher as committed, with the torch
# extension), rowsall = the same with rows::preferred always true (a measurement build: cuda-generic = rows kernel,
# cuda-hopper = bulk kernel, side by side in one kda-bench process).
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l2.log") 2>&1
T0=$(date +%s)
date -u
for b in rows rowsall; do mkdir -p /tmp/ab/$b && tar -xJf .carry/ab/$b.tar.xz -C /tmp/ab/$b; done
W=$(mktemp -d)
run() {  # name build timeout cmd...
  local n=$1 b=$2 t=$3; shift 3
  ( cd /tmp/ab/$b && OMP_NUM_THREADS=4 LD_LIBRARY_PATH=. timeout "$t" "$@" > "$W/$n.log" 2>&1; echo "== $n rc=$? $(tail -n 1 "$W/$n.log")" )
}
SF=14035002217949444255 SD=1862009593585421415
pids=()
run tests-dec-rowsall rowsall 200 ./kda_gpu_tests --gtest_filter='*Decode*' & pids+=($!)
run tests-dec-rows rows 200 ./kda_gpu_tests --gtest_filter='*Decode*-*CudaDecodePaths*b512*' & pids+=($!)
run verify-dec-rowsall rowsall 150 ./kda-verify --suite decode-full --impl cuda-generic --seed $SD & pids+=($!)
run verify-full-rows rows 200 ./kda-verify --suite full --impl cuda-generic --seed $SF & pids+=($!)
wait "${pids[@]}"
grep -hE 'FAIL|Failure' "$W"/*.log | head -20
(cd "$W" && tar -cf "$OUT/checks.tar" .)
date -u
echo "== decode: rows kernel (cuda-generic of rowsall) and bulk kernel (cuda-hopper) in one process"
(cd /tmp/ab/rowsall && LD_LIBRARY_PATH=. timeout 150 ./kda-bench --commit rowsall --impl cuda-generic --impl cuda-hopper \
  --iters 200 $(for h in 32 12; do for b in 1 8 32 128 256 512; do echo --workload decode-h$h-b$b; done; done) \
  --json "$OUT/decode-rowsall.json" > "$W/decode-rowsall.log" 2>&1; echo "rc=$?")
grep -E "^decode|median" "$W/decode-rowsall.log" | sed 's/ (seed.*//; s/(min.*sets)//'
cp "$W/decode-rowsall.log" "$OUT/"
date -u
echo "== kda (rows build, committed dispatcher) and FLA side by side: decode, then prefill"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export TRITON_CACHE_DIR=/tmp/kda-triton-cache PYTHONUNBUFFERED=1
mkdir -p $TRITON_CACHE_DIR
for part in decode prefill; do
  KDA_TORCH_LIBRARY=/tmp/ab/rows/libkda_torch.so LD_LIBRARY_PATH=/tmp/ab/rows PYTHONPATH="/tmp/site:$PWD/python" \
    timeout $([ $part = decode ] && echo 150 || echo $(( 560 - $(date +%s) + T0 ))) python3 scripts/bench_torch.py --part $part --commit rows \
    --json "$W/peers_$part.json" > "$W/peers_$part.log" 2>&1
  echo "$part rc=$?"
  grep -h -E "median|WRONG|FAILED|Error| / |floor" "$W/peers_$part.log" | cut -c1-200
  (cd "$W" && tar -rf "$OUT/peers.tar" peers_$part.json peers_$part.log)
  date -u
done
tar -cJf "$OUT/triton.tar.xz" -C "$TRITON_CACHE_DIR" .
date -u
