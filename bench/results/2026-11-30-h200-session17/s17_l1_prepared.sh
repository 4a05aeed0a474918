#!/usr/bin/env bash
# Prepared in session 16 for session 17's first device call (~460 s): branches statecl (796e760), s5wgmma (archive
# s5w, 06b7f33) and their merge (both) against main (8118d2b).
# statecl: on sm_90 the state pass (0d288a4) and the backward's reverse pass (713187f) run in clusters of two CTAs
# (two V tiles of one chain) that share the tiles both read (W, Qg, Kd, A_qk, decay): each CTA bulk-copies every other
# plane row, multicast into both CTAs, completing on a per-group mbarrier; a CTA barrier plus an execution-only cluster
# barrier where a group's buffers are released (chunk_state.cu, chunk_reverse.cu, sm90_async.cuh).
# Why: session 16's ncu put the state pass at 0.44 eligible warps of 4 per scheduler, tensor pipe 36%, L2 throughput
# ~52% averaged but each chunk's 128 KB a CTA arriving in bursts behind one phase of cover; stateov (fewer barriers)
# gained only 2.5%. The pair halves each SM's L2 reads of the shared tiles (128 -> 72 KB a chunk).
# Predicted: state pass 739 -> 450-600 us at h64-fixed (h64-fixed -140 to -290 us), h96 more (two launches);
# train-h64-fixed's backward -100 to -400 us (the reverse pass, and the recompute's state pass).
# Max Active Clusters (ncu's Occupancy section) must be >= 66: plan_state_pass counts one wave as 132 CTAs (the SM
# count); if pairs of SMs cannot all host a cluster, the h96 plan's first launch spills into a second wave.
# If it hangs or fails: the cluster protocol (mbarrier parity per chunk, expect_tx by lane 0 of warp 0, the relaxed
# cluster barrier after the CTA barrier) is where to look; the non-cluster form is unchanged (V = 64 at BV = 64 and
# every non-sm_90 device still take it).
# s5w: on sm_90, phase 1's bf16x3 [W | U] = T X on wgmma (12 wgmma.m64n64k16 a warpgroup, one warpgroup a 64-column
# panel; X_K / X_V split into wgmma's MN-major panels; T's upper blocks zeroed) instead of ldmatrix + mma.sync: the
# library's first wgmma. Predicted: phase 1 -30 to -80 us at h64-fixed (~6.4 K of ~74 K warp instructions a CTA
# become ~2-3 K). Not bit-identical by construction (wgmma's accumulation and the zero blocks it adds): its verifier
# figures must pass and stay within a few percent of main's; if a case fails wildly, suspect the planes' layout
# (the host test WgmmaPlaneLayout checks it against CuTe) or the fence before the wgmma.
# both: branch s17both (0999af6) = statecl + s5wgmma, what main gets if both win (different kernels: gains add).
# statecl changes no value by construction: its verifier lines must equal session 16's l4/verify-full-l2pre.log (full,
# seed SF) and l3/verify-bwdq.log (backward-quick, seed SB) line for line, times aside.
# Run as: OUT=$OUT bash .carry/lease/s17_l1_prepared.sh   with carry [".carry/lease", ".carry/ab"].
# Archives (.carry/ab): main = 8118d2b (session 16's l2pre build, with libkda_torch.so), statecl = 796e760, s5w = 06b7f33
# (branch s5wgmma); rebuild with scripts/gpu_build.sh --torch-wheel ... in a checkout of each if .carry is gone.
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l1.log") 2>&1
date -u
for b in statecl s5w; do mkdir -p /tmp/ab/$b && tar -xJf .carry/ab/$b.tar.xz -C /tmp/ab/$b; done
B=/tmp/ab/statecl
W=$(mktemp -d)
run() {  # name build timeout cmd...
  local n=$1 b=$2 t=$3; shift 3
  ( cd /tmp/ab/$b && OMP_NUM_THREADS=3 LD_LIBRARY_PATH=. timeout "$t" "$@" > "$W/$n.log" 2>&1; echo "== $n rc=$? $(tail -n 1 "$W/$n.log")" )
}
SF=14035002217949444255 SB=15368221980386543344
pids=()
run verify-full statecl 240 ./kda-verify --suite full --impl cuda-generic --seed $SF & pids+=($!)
run verify-bwdq statecl 200 ./kda-verify --suite backward-quick --impl cuda-generic --seed $SB & pids+=($!)
run tests statecl 240 ./kda_gpu_tests & pids+=($!)
run verify-full-s5w s5w 240 ./kda-verify --suite full --impl cuda-generic --seed $SF & pids+=($!)
run tests-s5w s5w 240 ./kda_gpu_tests --gtest_filter='-*Decode*:*Backward*' & pids+=($!)
wait "${pids[@]}"  # never a bare wait (the tee above)
grep -hE "FAIL|Failure|error" "$W"/*.log | head -20
ncu_out() { (cd $B && LD_LIBRARY_PATH=. timeout 100 ncu --clock-control none -k regex:state_kernel -c 2 --section SpeedOfLight \
  --section MemoryWorkloadAnalysis --section SchedulerStats --section Occupancy ./kda-bench --workload $1 --impl cuda-generic --no-verify \
  --iters 1 --warmup 0 > "$W/ncu-state-$1.txt" 2>&1)
  grep -E "state_kernel|Duration|Compute \(SM\)|L2 Cache Throughput|Eligible Warps|Max Active Clusters" \
    "$W/ncu-state-$1.txt" | cut -c1-120; }
ncu_out h64-fixed; ncu_out h96-fixed
(cd "$W" && tar -czf "$OUT/checks.tgz" .)
date -u
OUT=$OUT timeout 220 bash scripts/gpu_ab.sh --builds main,statecl,s5w,both --impl cuda-generic --rounds 2 \
  --workload h64-fixed --workload h96-fixed --workload h64-mixed
echo "gpu_ab rc=$?"
date -u
OUT=$OUT timeout 100 bash scripts/gpu_ab.sh --builds main,statecl --impl cuda-generic --rounds 1 --workload train-h64-fixed
echo "gpu_ab rc=$?"
date -u
