#!/usr/bin/env bash
# Prepared in session 19 for session 20's first device call (~500 s): checks of revtma, ssp, qgb, wide, nb, then the
# forward's A/B of main, ssp and qgb on four prefill workloads, and qgb against wide at h96-fixed (s20_l2: the
# backward's; s20_l3: kda beside FLA).
# main (feb64fa): session 19's merge, the state pass's copies on TMA (a678695; h64-fixed 1825 us, train-h64 backward
#   12827 us in session 19's call 5), + the passes' prologue / prefetch / dO' loads from shared helpers (SASS: register
#   renaming, a few integer ops; its checks run in s20_l2). The branches below rest on 8f19fc5, before that refactor.
# revtma (branch revtma, 2581c4e = main + the tile maps in tma_map.cu + the reverse pass's copies on TMA, thread 0 and
#   one mbarrier a step; the L2 prefetch kept): its copies were 16% of the reverse pass's instructions. Predicted:
#   train-h64 backward -60 to -150 us; forward unchanged (the state pass's SASS is main's).
# ssp (branch ssp, 8d1c61c = revtma + the plane stores of the state (S, V_new) and reverse (dS, -dU) passes and the
#   state pass's output stores from per-thread bases: store_state_planes 668 -> 335 SASS instructions a warp, 254 ->
#   210 / 219 registers). Predicted: h64-fixed -30 to -80 us (the chain's phase B is ~40% store_state_planes),
#   train backward -50 to -120 against revtma.
# qgb (branch qgb, 8801219 = ssp + the output's A_qk V_new and Qg S^T both in phase B, Qg S^T last, on the
#   chunk's state planes kept twice; phase A's tensor cores the chain's alone; the TMA rows from chunk_map.h
#   tile_rows). Predicted: h64-fixed -20 to -60 against ssp.
# wide (branch wide, qgb + the forward's state pass keeping 64-column tiles for every chain where they run on wgmma:
#   no mma.sync 32-column second launch at h96-fixed, ~564 us in session 16's ncu, against ~552 us for the first,
#   wgmma wave). Predicted: h96-fixed -30 to -100 us against qgb; nothing else moves (only fixed-length batches with
#   a last wave to split). Timed after the A/B, at h96-fixed only.
# nb (branch nb, wide + no output products in the state pass when no output is wanted, i.e. the backward's
#   recompute). Checked here (backward-quick), timed in s20_l2. Predicted: train-h64 backward -50 to -100 against
#   qgb (session 19's stgnb: -80 on the cp.async pass).
# revtma and ssp change no value: their verifier lines must equal session 19's tma lines (l5/checks.tgz) but the
# timing column; qgb sums o's two products in the other order (its lines may differ in the last digits).
# If a check fails: revtma - an mbarrier parity (chunks run from the last: (last - 1 - ci) & 1) or a box's row;
# ssp - AccPlaneOffset against the kernel's use (the host tests WgmmaStateLayout.* pass, so look at the call sites);
# qgb - the state-plane pair of a chunk (s_planes) or Qg's group.
# Run as: OUT=$OUT bash .carry/lease/s20_l1_prepared.sh   with carry [".carry/lease", ".carry/ab"].
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l1.log") 2>&1
date -u
W=$(mktemp -d)
source scripts/lease_lib.sh
lease_unpack main revtma ssp qgb wide nb
SF=14035002217949444255 SB=15368221980386543344
pids=()
# Session 19's full run took ~145 s with seven processes on the 16 cores: the two full runs get 5 threads each here.
lease_run verify-full-ssp ssp 5 240 ./kda-verify --suite full --impl cuda-generic --seed $SF & pids+=($!)
lease_run verify-full-qgb qgb 5 240 ./kda-verify --suite full --impl cuda-generic --seed $SF & pids+=($!)
for b in revtma ssp qgb nb; do
  lease_run verify-bwdq-$b $b 1 200 ./kda-verify --suite backward-quick --impl cuda-generic --seed $SB & pids+=($!)
done
lease_run verify-h96-wide wide 3 200 ./kda-verify --suite full --impl cuda-generic --seed $SF --filter h96 & pids+=($!)
F='Wgmma*:Own/CudaHopper.*:Cases/CudaHopperBackward.*:CudaBehaviour.*:Backends/CudaBackwardDeterminism.*'
for b in revtma ssp qgb nb; do lease_run tests-$b $b 1 200 ./kda_gpu_tests --gtest_filter="$F" & pids+=($!); done
wait "${pids[@]}"  # never a bare wait (the tee above)
grep -hE "FAILED|Failure|FAIL " "$W"/*.log | head -20
pre=main
for b in ssp qgb; do grep -q "39 passed, 0 failed" "$W/verify-full-$b.log" && pre=$pre,$b; done
echo "timed: prefill $pre"
for b in ${pre//,/ }; do [ $b = main ] || lease_ncu $b h64-fixed state_wgmma; done
(cd "$W" && tar -czf "$OUT/checks.tgz" .)
date -u
[ "$pre" = main ] || { OUT=$OUT timeout 200 bash scripts/gpu_ab.sh --builds $pre --impl cuda-generic --rounds 2 \
  --workload h64-fixed --workload h64-mixed --workload h96-fixed --workload h96-uniform; echo "gpu_ab rc=$?"; }
date -u
grep -q "passed, 0 failed" "$W/verify-h96-wide.log" && grep -q "39 passed, 0 failed" "$W/verify-full-qgb.log" && {
  OUT=$OUT timeout 70 bash scripts/gpu_ab.sh --builds qgb,wide --impl cuda-generic --rounds 2 --workload h96-fixed
  echo "gpu_ab wide rc=$?"; }
date -u
