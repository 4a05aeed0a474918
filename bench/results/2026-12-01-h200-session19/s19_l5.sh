#!/usr/bin/env bash
# Session 19 call 5 (~450 s): the state pass's copies on TMA, against stg2 (= main a95928d's state kernel, SASS
# identical). tma (a678695): each tile copied by one thread's TMA boxes on two mbarriers (group A / B, stg2's
# schedule) instead of cp.async from every thread (~26% of stg2's instructions). tmaov (tma + this): each tile's copy
# issued as soon as its reader warpgroup is done with the previous chunk's, four mbarriers.
# Predicted: tma -20 to -60 us at h64-fixed (fewer instructions, same schedule); tmaov -100 to -200 against stg2.
# Verifier lines must equal stg2's to the digit (same products in the same order; only the copies changed).
# A hang (an mbarrier never completing) is cut by each step's timeout; a build that fails its checks is not timed.
# Run as: OUT=$OUT bash .carry/lease/s19_l5.sh   with carry [".carry/lease", ".carry/ab"].
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l5.log") 2>&1
date -u
for b in stg2 tma tmaov; do mkdir -p /tmp/ab/$b && tar -xJf .carry/ab/$b.tar.xz -C /tmp/ab/$b; done
W=$(mktemp -d)
run() {  # name build timeout cmd...
  local n=$1 b=$2 t=$3; shift 3
  ( cd /tmp/ab/$b && OMP_NUM_THREADS=3 LD_LIBRARY_PATH=. timeout "$t" "$@" > "$W/$n.log" 2>&1; echo "== $n rc=$? $(tail -n 1 "$W/$n.log")" )
}
SF=14035002217949444255 SB=15368221980386543344
pids=()
for b in tma tmaov; do
  run verify-full-$b $b 150 ./kda-verify --suite full --impl cuda-generic --seed $SF & pids+=($!)
  run verify-bwdq-$b $b 150 ./kda-verify --suite backward-quick --impl cuda-generic --seed $SB & pids+=($!)
  run tests-$b $b 150 ./kda_gpu_tests --gtest_filter='Wgmma*:Own/CudaHopper.*:Cases/CudaHopperBackward.*:CudaBehaviour.*' & pids+=($!)
done
wait "${pids[@]}"  # never a bare wait (the tee above)
grep -hE "FAILED|Failure|FAIL " "$W"/*.log | head -20
ok=stg2
for b in tma tmaov; do
  if grep -q "39 passed, 0 failed" "$W/verify-full-$b.log" && grep -q "21 passed, 0 failed" "$W/verify-bwdq-$b.log"; then
    ok="$ok,$b"
  fi
done
echo "timed: $ok"
nc() {  # build workload kernel-regex
  (cd /tmp/ab/$1 && LD_LIBRARY_PATH=. timeout 40 ncu --clock-control none -k regex:$3 -c 1 --section \
    SpeedOfLight --section MemoryWorkloadAnalysis --section SchedulerStats --section InstructionStats ./kda-bench \
    --workload $2 --impl cuda-generic --no-verify --iters 1 --warmup 0 > "$W/ncu-$1-$2-$3.txt" 2>&1)
  echo "== ncu $1 $2 $3"; grep -E "Duration|Compute \(SM\)|DRAM Throughput|Mem Busy|Eligible Warps|Executed Instructions " \
    "$W/ncu-$1-$2-$3.txt" | cut -c1-100
}
for b in ${ok//,/ }; do [ $b = stg2 ] || nc $b h64-fixed state_wgmma; done
(cd "$W" && tar -czf "$OUT/checks.tgz" .)
date -u
if [ "$ok" != stg2 ]; then
  OUT=$OUT timeout 200 bash scripts/gpu_ab.sh --builds $ok --impl cuda-generic --rounds 2 \
    --workload h64-fixed --workload h64-mixed --workload h96-fixed --workload h96-uniform
  echo "gpu_ab rc=$?"
  date -u
  OUT=$OUT timeout 130 bash scripts/gpu_ab.sh --builds $ok --impl cuda-generic --rounds 1 --workload train-h64-fixed
  echo "gpu_ab train rc=$?"
fi
date -u
