#!/usr/bin/env bash
# Session 16, call 4 (~500 s): 
#   1. branch l2pre (8118d2b: phase 1 asks L2 for the q / k / g / v rows of the CTA one wave ahead) against main
#      (9cd0cff = 1829c28 + stateov). Verifier lines must equal call 3's (same seed; a prefetch changes no value).
#      Predicted: phase 1 -30 to -100 us at h64-fixed (S0's DRAM latency once per CTA; session 9's persistent
#      prepre with the same prefetch lost 2%, with ~12 more registers; this one keeps 116).
#   2. kda (main) beside FLA on all six prefill workloads in one process (issue #3 criterion 4).
#   3. ncu warp-state and memory sections of main's state pass at h64-fixed: what bounds it now that the barrier
#      count fell from six to two a chunk with little gain (call 3: 757 -> 738 us).
# Run as: OUT=$OUT bash .carry/lease/s16_l4.sh   with carry [".carry/lease", ".carry/ab", ".whl", ".carry/triton.tgz"].
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l4.log") 2>&1
date -u
for b in main l2pre; do mkdir -p /tmp/ab/$b && tar -xJf .carry/ab/$b.tar.xz -C /tmp/ab/$b; done
SF=14035002217949444255
(cd /tmp/ab/l2pre && OMP_NUM_THREADS=12 LD_LIBRARY_PATH=. timeout 150 ./kda-verify --suite full --impl cuda-generic \
  --seed $SF > "$OUT/verify-full-l2pre.log" 2>&1; echo "== verify l2pre rc=$? $(tail -n 1 "$OUT/verify-full-l2pre.log")")
date -u
OUT=$OUT timeout 150 bash scripts/gpu_ab.sh --builds main,l2pre --impl cuda-generic --rounds 2 \
  --workload h64-fixed --workload h96-fixed --workload h64-mixed
echo "gpu_ab rc=$?"
date -u
export TRITON_CACHE_DIR=/tmp/kda-triton-cache; mkdir -p $TRITON_CACHE_DIR
[ -f .carry/triton.tgz ] && tar -xzf .carry/triton.tgz -C /tmp
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
KDA_TORCH_LIBRARY=/tmp/ab/main/libkda_torch.so PYTHONPATH="/tmp/site:$PWD/python" timeout 270 \
  python3 scripts/bench_torch.py --part prefill --commit 9cd0cff --json "$OUT/peers_prefill.json" \
  > "$OUT/peers_prefill.log" 2>&1; echo "prefill rc=$?"
grep -h -E "median|WRONG|FAILED|Error| / |floor" "$OUT/peers_prefill.log" | head -40
date -u
(cd /tmp/ab/main && LD_LIBRARY_PATH=. timeout 60 ncu --clock-control none -k regex:state_kernel -c 1 --section WarpStateStats \
  --section MemoryWorkloadAnalysis --section SchedulerStats --section ComputeWorkloadAnalysis ./kda-bench --workload h64-fixed \
  --impl cuda-generic --no-verify --iters 1 --warmup 0 > "$OUT/ncu-state-stalls.txt" 2>&1; echo "ncu rc=$?")
grep -E "Stall|Issue|Warp Cycles|Eligible|Throughput" "$OUT/ncu-state-stalls.txt" | head -20
timeout 20 tar -czf "$OUT/triton.tgz" -C /tmp kda-triton-cache
date -u
