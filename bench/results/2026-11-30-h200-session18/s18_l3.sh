#!/usr/bin/env bash
# Session 18, call 3 (~480 s): the wgmma state pass with an L2 prefetch of later chunks' tiles (wpf1: one chunk
# ahead, wpf2: two) and with the chain's products issued first (wpo = wpf1 + named barrier 1), against main (b500ffd)
# and wgr (wg18 before the prefetch: the state and reverse passes on wgmma); ncu of the state kernels at h64-mixed,
# where wg1 measured +55 us against main while h64-fixed went -67.
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l3.log") 2>&1
date -u
for b in main wgr wpf1 wpf2 wpo; do mkdir -p /tmp/ab/$b && tar -xJf .carry/ab/$b.tar.xz -C /tmp/ab/$b; done
W=$(mktemp -d)
run() {  # name build timeout cmd...
  local n=$1 b=$2 t=$3; shift 3
  ( cd /tmp/ab/$b && OMP_NUM_THREADS=3 LD_LIBRARY_PATH=. timeout "$t" "$@" > "$W/$n.log" 2>&1; echo "== $n rc=$? $(tail -n 1 "$W/$n.log")" )
}
SF=14035002217949444255 SB=15368221980386543344
pids=()
run verify-full-wpf1 wpf1 150 ./kda-verify --suite full --impl cuda-generic --seed $SF & pids+=($!)
run verify-full-wpo wpo 150 ./kda-verify --suite full --impl cuda-generic --seed $SF & pids+=($!)
run tests-wpo wpo 150 ./kda_gpu_tests --gtest_filter='Own/CudaHopper.*:CudaBehaviour.*' & pids+=($!)
run verify-bwdq-wpf1 wpf1 150 ./kda-verify --suite backward-quick --impl cuda-generic --seed $SB & pids+=($!)
wait "${pids[@]}"
grep -hE "FAILED|Failure|FAIL " "$W"/*.log | head -20
date -u
nc() {  # build workload
  (cd /tmp/ab/$1 && LD_LIBRARY_PATH=. timeout 60 ncu --clock-control none -k regex:state_ -c 1 --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section SchedulerStats --section LaunchStats ./kda-bench \
    --workload $2 --impl cuda-generic --no-verify --iters 1 --warmup 0 > "$W/ncu-$1-$2.txt" 2>&1)
  echo "== ncu $1 $2"; grep -E "Duration|Compute \(SM\)|DRAM Throughput|L2 Hit|Mem Busy|Eligible Warps|Grid Size" \
    "$W/ncu-$1-$2.txt" | cut -c1-100
}
nc main h64-mixed; nc wgr h64-mixed; nc wpf1 h64-mixed; nc wpf1 h64-fixed
(cd "$W" && tar -czf "$OUT/checks.tgz" .)
date -u
OUT=$OUT timeout 220 bash scripts/gpu_ab.sh --builds main,wgr,wpf1,wpf2,wpo --impl cuda-generic --rounds 2 \
  --workload h64-fixed --workload h96-fixed --workload h64-mixed
echo "gpu_ab rc=$?"
date -u
OUT=$OUT timeout 170 bash scripts/gpu_ab.sh --builds wgr,wpf1,wpo --impl cuda-generic --rounds 1 \
  --workload train-h64-fixed
echo "gpu_ab train rc=$?"
date -u
