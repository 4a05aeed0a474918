#!/usr/bin/env bash
# Session 16, call 3 (~300 s): branch stateov (9cd0cff: the state pass with two warp roles, 8 chain warps + 8 output
# warps, two barriers a chunk) against main (1829c28). No value changes by construction: its verifier lines must
# equal call 1's (l1/verify-full-s3ov.log, l1/verify-bwdq-s3ov.log; same seeds) line for line.
# Predicted: the state pass 757 -> 450-600 us at h64-fixed (~10.5 K cycles a chunk against ~4-5 K of tensor issue),
# so h64-fixed -150 to -300 us; h96-fixed more (two launches of it); train-h64-fixed's backward a little (its
# recompute runs this kernel with saves).
# Run as: OUT=$OUT bash .carry/lease/s16_l3.sh   with carry [".carry/lease", ".carry/ab"].
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l3.log") 2>&1
date -u
B=/tmp/ab/stateov; mkdir -p $B && tar -xJf .carry/ab/stateov.tar.xz -C $B
W=$(mktemp -d)
run() {  # name timeout cmd...
  local n=$1 t=$2; shift 2
  ( cd $B && OMP_NUM_THREADS=5 LD_LIBRARY_PATH=. timeout "$t" "$@" > "$W/$n.log" 2>&1; echo "== $n rc=$? $(tail -n 1 "$W/$n.log")" )
}
SF=14035002217949444255 SB=15368221980386543344
pids=()
run verify-full 240 ./kda-verify --suite full --impl cuda-generic --seed $SF & pids+=($!)
run verify-bwdq 200 ./kda-verify --suite backward-quick --impl cuda-generic --seed $SB & pids+=($!)
run tests 240 ./kda_gpu_tests --gtest_filter='-*Decode*' & pids+=($!)
wait "${pids[@]}"  # never a bare wait (the tee above)
grep -hE "FAIL|Failure" "$W"/*.log | head -20
ncu_out() { (cd $B && LD_LIBRARY_PATH=. timeout 100 ncu --clock-control none -k regex:state_kernel -c 2 --section SpeedOfLight \
  ./kda-bench --workload $1 --impl cuda-generic --no-verify --iters 1 --warmup 0 > "$W/ncu-state-$1.txt" 2>&1)
  grep -E "state_kernel|Duration|Compute \(SM\)" "$W/ncu-state-$1.txt" | cut -c1-120; }
ncu_out h64-fixed; ncu_out h96-fixed
(cd "$W" && tar -czf "$OUT/checks.tgz" .)
date -u
OUT=$OUT timeout 240 bash scripts/gpu_ab.sh --builds main,stateov --impl cuda-generic --rounds 2 \
  --workload h64-fixed --workload h96-fixed --workload h64-mixed --workload train-h64-fixed
echo "gpu_ab rc=$?"
date -u
