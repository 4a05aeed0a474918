#!/usr/bin/env bash
# Prepared in session 17 for session 18's first device call (~480 s): wg1 (branch statewg, 03d9ad6), the forward's
# state pass on sm_90a wgmma (src/cuda/hopper/state_wgmma.cu), against main (b500ffd = 74afc54's code: session 17's
# main with the reverse pass's L2 prefetch). Both archives carry libkda_torch.so.
# wg1: K = 128, 64-column V tiles (every h64 launch, h96's first), two warpgroups (chain: V_new = U - W S^T, S =
# S diag(decay) + V_new^T Kd with S the m64n128 accumulator; output: Qg S^T + A_qk V_new), bf16x3 on wgmma from
# CuTe's 128-byte-swizzled GMMA planes. 255 registers, no spills, 72 HGMMA, 182,784 bytes of shared memory.
# Why: session 17's ncu put the mma.sync state pass at the shared-memory limit (Mem Busy 62%, ~800 KB a chunk);
# wgmma reads each B tile once per warpgroup (~310 KB of operand reads a chunk). Predicted: the state pass 734 ->
# 300-450 us at h64-fixed (h64-fixed -280 to -430 us: 2.00 -> 1.6-1.7 ms, under FLA's 1.76); h96-fixed -150 to
# -300 (its second launch, 32-column tiles, stays on mma.sync); train-h64's backward -150 to -300 (the recompute's
# state pass takes it too). Not bit-identical (wgmma's summation order): the verifier judges it; its figures should
# be main's within the last digits (out 1.663e-3, state ~7e-6).
# First GPU run of this kernel: if the checks fail, suspect (1) the fence.proxy.async / barrier order around the
# plane stores, (2) the MN-major 128 x 64 Kd view (the only layout WgmmaLayout's probes do not cover: m64n128),
# (3) the accumulator coordinate mapping (host test WgmmaStateLayout passed on the CPU). The same binary forces
# either form: --impl cuda-hopper (wgmma) / cuda-chunked (mma.sync) in kda-bench and the GPU tests (Own/CudaHopper
# against Own/CudaChunked), so a failure can be put side by side with the mma.sync kernel's answer on one input.
# pp (branch prodpp, 78d5fe7): the backward's products kernel stages k-slices into two buffers, one barrier a slice;
# bit-identical by construction: its backward-quick lines must equal session 17's (l3/verify-bwdq-pf1.log, seed SB).
# Its time is s18_l2_prepared.sh's (train-h64-fixed, main / wg1 / pp / wgr).
# wgr (branch revwg, a1b6cec = wg1 + the backward's reverse pass on wgmma, src/cuda/hopper/reverse_wgmma.cu: two
# warpgroups, dU split by value columns (m64n32), dS by key columns (m64n64)): checked here (backward GPU tests and
# backward-quick; not bit-identical), timed in s18_l2_prepared.sh. Predicted: reverse pass 1.24 ms -> 0.4-0.6.
# wgp (branch statewgp, 38f999b = wg1 + plan_state_pass's wide_only): where the wgmma kernel runs, every tile is 64
# columns in one launch (h96-fixed's last 30 chains no longer go to the mma.sync kernel in 32-column tiles). Only
# h96-fixed's plan changes. Predicted: h96-fixed a further -100 to -250 us against wg1.
# Run as: OUT=$OUT bash .carry/lease/s18_l1_prepared.sh   with carry [".carry/lease", ".carry/ab"].
# If .carry is gone: each archive is `bash scripts/gpu_build.sh [--torch-wheel WHEEL]` in a checkout of its branch
# (or of main with the patches in bench/results/2026-11-30-h200-session17/ applied), .carry/bin.tar.xz copied to
# .carry/ab/NAME.tar.xz with the commit in NAME.COMMIT; main and wg1 with the torch wheel (s18_l2 runs bench_torch).
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l1.log") 2>&1
date -u
for b in wg1 main pp wgr wgp; do mkdir -p /tmp/ab/$b && tar -xJf .carry/ab/$b.tar.xz -C /tmp/ab/$b; done
W=$(mktemp -d)
run() {  # name build timeout cmd...
  local n=$1 b=$2 t=$3; shift 3
  ( cd /tmp/ab/$b && OMP_NUM_THREADS=3 LD_LIBRARY_PATH=. timeout "$t" "$@" > "$W/$n.log" 2>&1; echo "== $n rc=$? $(tail -n 1 "$W/$n.log")" )
}
SF=14035002217949444255 SB=15368221980386543344
pids=()
run tests-wg1 wg1 200 ./kda_gpu_tests --gtest_filter='Wgmma*:Own/CudaHopper.*:Own/CudaChunked.*:CudaBehaviour.*' & pids+=($!)
run verify-full-wg1 wg1 200 ./kda-verify --suite full --impl cuda-generic --seed $SF & pids+=($!)
run verify-bwdq-wg1 wg1 200 ./kda-verify --suite backward-quick --impl cuda-generic --seed $SB & pids+=($!)
run verify-bwdq-pp pp 200 ./kda-verify --suite backward-quick --impl cuda-generic --seed $SB & pids+=($!)
run verify-bwdq-wgr wgr 200 ./kda-verify --suite backward-quick --impl cuda-generic --seed $SB & pids+=($!)
run verify-h96-wgp wgp 200 ./kda-verify --suite full --impl cuda-generic --seed $SF --filter workload_h96 & pids+=($!)
run tests-wgr wgr 200 ./kda_gpu_tests --gtest_filter='WgmmaLayout.Reverse*:Cases/CudaHopperBackward.*:Backends/CudaBackwardDeterminism.*' & pids+=($!)
wait "${pids[@]}"  # never a bare wait (the tee above)
grep -hE "FAILED|Failure|FAIL " "$W"/*.log | head -20
(cd /tmp/ab/wg1 && LD_LIBRARY_PATH=. timeout 80 ncu --clock-control none -k regex:state_ -c 2 --section SpeedOfLight \
  --section MemoryWorkloadAnalysis --section SchedulerStats --section Occupancy --section LaunchStats ./kda-bench \
  --workload h64-fixed --impl cuda-generic --no-verify --iters 1 --warmup 0 > "$W/ncu-state-wg1.txt" 2>&1)
grep -E "state_|Duration|Compute \(SM\)|Mem Busy|L2 Cache Throughput|Eligible Warps|Registers Per" \
  "$W/ncu-state-wg1.txt" | cut -c1-120
(cd "$W" && tar -czf "$OUT/checks.tgz" .)
date -u
OUT=$OUT timeout 200 bash scripts/gpu_ab.sh --builds main,wg1,wgp --impl cuda-generic --rounds 2 \
  --workload h64-fixed --workload h96-fixed --workload h64-mixed
echo "gpu_ab rc=$?"
date -u
