#!/usr/bin/env bash
# Session 15, call 5: the fused decode kernel with its conv taps and stored inputs loaded as raw bits (archive head3), one-wave
# dispatch, checked and timed against the three-kernel form in one process (cuda-hopper forces
# the bulk kernel with the conv and norm as their own kernels).
# Run as: OUT=$OUT bash .carry/lease/s15_l5.sh   with carry [".carry/lease", ".carry/ab", ".whl"].
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l5.log") 2>&1
date -u
B=/tmp/ab/head3; mkdir -p $B && tar -xJf .carry/ab/head3.tar.xz -C $B
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
w=(); for x in b1 b1-fused b8-fused; do w+=(--workload decode-h32-$x); done
(cd $B && LD_LIBRARY_PATH=. timeout 120 ./kda-bench --commit head3 --impl cuda-generic --impl cuda-hopper --iters 200 \
  "${w[@]}" --json "$W/decode-fused.json" > "$W/decode-fused.log" 2>&1; echo "bench rc=$?")
grep -E "^decode|median" "$W/decode-fused.log" | sed 's/ (seed.*//; s/(min.*sets)//'
(cd "$W" && tar -cf "$OUT/checks.tar" .)
date -u
