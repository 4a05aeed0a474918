#!/usr/bin/env bash
# Session 15, call 3: the one-kernel fused decode (decode_head.cu, archive head) checked and timed against the
# three-kernel form in one process (cuda-hopper forces the bulk kernel with the conv and norm as their own kernels),
# then kda's prefill beside FLA's on h64-fixed and h96-fixed in one process (FLA compiles without a cache here).
# Run as: OUT=$OUT bash .carry/lease/s15_l3.sh   with carry [".carry/lease", ".carry/ab", ".whl"].
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l3.log") 2>&1
date -u
B=/tmp/ab/head; mkdir -p $B && tar -xJf .carry/ab/head.tar.xz -C $B
W=$(mktemp -d)
run() {  # name timeout cmd...
  local n=$1 t=$2; shift 2
  ( cd $B && OMP_NUM_THREADS=8 LD_LIBRARY_PATH=. timeout "$t" "$@" > "$W/$n.log" 2>&1; echo "== $n rc=$? $(tail -n 1 "$W/$n.log")" )
}
pids=()
run tests-fused 150 ./kda_gpu_tests --gtest_filter='*CudaFusedDecode*:Cases/CudaDecode.*-*b512*' & pids+=($!)
run verify-dec 150 ./kda-verify --suite decode-quick --impl cuda-generic & pids+=($!)
wait "${pids[@]}"  # never a bare wait (the tee above)
grep -hE "FAIL|Failure" "$W"/*.log | head -20
grep -hE "^  fused" "$W/tests-fused.log" | cut -c1-200 | head -20
date -u
w=(); for x in b1 b1-fused b32 b32-fused b256 b256-conv b256-norm b256-fused; do w+=(--workload decode-h32-$x); done
(cd $B && LD_LIBRARY_PATH=. timeout 120 ./kda-bench --commit head --impl cuda-generic --impl cuda-hopper --iters 200 \
  "${w[@]}" --json "$W/decode-fused.json" > "$W/decode-fused.log" 2>&1; echo "bench rc=$?")
grep -E "^decode|median" "$W/decode-fused.log" | sed 's/ (seed.*//; s/(min.*sets)//'
(cd "$W" && tar -cf "$OUT/checks.tar" .)
date -u
export TRITON_CACHE_DIR=/tmp/kda-triton-cache; mkdir -p $TRITON_CACHE_DIR
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
KDA_TORCH_LIBRARY="$B/libkda_torch.so" PYTHONPATH="/tmp/site:$PWD/python" timeout 250 \
  python3 scripts/bench_torch.py --part prefill --workload h64-fixed --workload h96-fixed --commit head \
  --json "$OUT/peers_prefill.json" > "$OUT/peers_prefill.log" 2>&1; echo "prefill rc=$?"
grep -h -E "median|WRONG|FAILED|Error| / |floor" "$OUT/peers_prefill.log" | head -30
date -u
