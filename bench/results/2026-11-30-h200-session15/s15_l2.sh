#!/usr/bin/env bash
# Session 15, call 2: the bf16-pool bulk kernel (7f1caef, archive bf16b) checked and timed beside fp32, then kda's
# training step against FLA's in one process (issue #9; FLA's autotuning is paid here, its cache handed back).
# Run as: OUT=$OUT bash .carry/lease/s15_l2.sh   with carry [".carry/lease", ".carry/ab", ".whl"].
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l2.log") 2>&1
date -u
B=/tmp/ab/bf16b; mkdir -p $B && tar -xJf .carry/ab/bf16b.tar.xz -C $B
W=$(mktemp -d)
run() {  # name timeout cmd...
  local n=$1 t=$2; shift 2
  ( cd $B && OMP_NUM_THREADS=4 LD_LIBRARY_PATH=. timeout "$t" "$@" > "$W/$n.log" 2>&1; echo "== $n rc=$? $(tail -n 1 "$W/$n.log")" )
}
pids=()
run tests-decode 200 ./kda_gpu_tests --gtest_filter='*Decode*' & pids+=($!)
run verify-dec 200 ./kda-verify --suite decode-full --impl cuda-generic --seed 1862009593585421415 & pids+=($!)
wait "${pids[@]}"  # never a bare wait (the tee above)
grep -hE "FAIL|Failure" "$W"/*.log | head -20
grep -hE "bf16" "$W/tests-decode.log" | head -20
date -u
(cd $B && LD_LIBRARY_PATH=. timeout 120 ./kda-bench --commit bf16b --impl cuda-generic --iters 200 \
  $(for b in 1 8 32 128 256 512; do echo --workload decode-h32-b$b; done) \
  $(for b in 1 32 256; do echo --workload decode-h32-b$b-bf16; done) \
  --json "$W/decode-bf16.json" > "$W/decode-bf16.log" 2>&1; echo "bench rc=$?")
grep -E "^decode|median" "$W/decode-bf16.log" | sed 's/ (seed.*//; s/(min.*sets)//'
(cd "$W" && tar -cf "$OUT/checks.tar" .)
date -u
export TRITON_CACHE_DIR=/tmp/kda-triton-cache; mkdir -p $TRITON_CACHE_DIR
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
KDA_TORCH_LIBRARY="$B/libkda_torch.so" PYTHONPATH="/tmp/site:$PWD/python" timeout 380 \
  python3 scripts/bench_torch.py --part train --workload train-h64-fixed --iters 40 --commit 7f1caef \
  --json "$OUT/peers_train.json" > "$OUT/peers_train.log" 2>&1; echo "train rc=$?"
grep -h -E "median|WRONG|FAILED|Error| / |MiB" "$OUT/peers_train.log" | head -30
tar -cJf "$OUT/triton.tar.xz" -C $TRITON_CACHE_DIR .
date -u
