#!/usr/bin/env bash
# Prepared in session 20 for session 21's second device call (~480 s): wus3 (37fc0e7, +22..+45 us, reverted) in its
# three parts, each alone on main, and tinv2, against wus; ncu with source of s2p's prepare kernel.
# tinv2 (branch tinv2, d5b4910): S4's off-diagonal T blocks as the 2 x 2 block inverse twice (4 + 4 + 4 k-steps on
#   4 warps instead of 4 + 6 + 8 on 3, 2, 1). Predicted -10..-50 us at h64-fixed (if the rounds, not warps 8-15's
#   splits, are S4's critical path); not bit-identical (T's products in another association; the backward's T too).
# dsbulk (branch dsbulk, 5f4de61): the reverse pass's per-chunk dS store through a shared-memory stage and bulk
#   copies (its scattered 8-byte stores held 18% of the pass's stall samples, ncu session 20). Predicted train-h64
#   backward -60..-150 us; bit-identical (its backward-quick lines must equal wus's but the timing).
# wa (branch wa, d9e492e): S5c's bulk copies issued by one lane a warp (wus's 32-lane R2UR loop gone).
# wb (branch wb, ef17704): S4's A_qk planes in 8-byte stores, four entries a thread and step.
# wc (branch wc, 3bb9516): the 3xTF32 branch (the backward's recompute, a forward saving for it) staged as the
#   bf16x3 one (108 registers). Predicted: wa / wb within +-20 us each (one of them, or neither, carries wus3's
#   loss); wc train-h64 backward -20..-60.
# Run as: OUT=$OUT bash .carry/lease/s21_l2_prepared.sh   with carry [".carry/lease", ".carry/ab/wus.tar.xz",
# ".carry/ab/wa.tar.xz", ".carry/ab/wb.tar.xz", ".carry/ab/wc.tar.xz", ".carry/ab/s2p.tar.xz", ".carry/ab/tinv2.tar.xz",
# ".carry/ab/dsbulk.tar.xz"] (eight paths, the most a call takes).
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l2.log") 2>&1
date -u
W=$(mktemp -d)
source scripts/lease_lib.sh
lease_unpack wus wa wb wc s2p tinv2 dsbulk
SF=14035002217949444255 SB=15368221980386543344
pids=()
for b in wa wb tinv2; do
  lease_run verify-full-$b $b 4 240 ./kda-verify --suite full --impl cuda-generic --seed $SF & pids+=($!)
done
F='Cases/CudaHopperBackward.*:Backends/CudaBackwardDeterminism.*'
lease_run tests-dsbulk dsbulk 1 200 ./kda_gpu_tests --gtest_filter="$F" & pids+=($!)
for b in wc tinv2 dsbulk; do
  lease_run verify-bwdq-$b $b 1 200 ./kda-verify --suite backward-quick --impl cuda-generic --seed $SB & pids+=($!)
done
wait "${pids[@]}"  # never a bare wait (the tee above)
grep -hE "FAILED|Failure|FAIL " "$W"/*.log | head -20
(cd "$W" && tar -czf "$OUT/checks.tgz" .)
date -u
pre=wus
for b in wa wb tinv2; do grep -q "39 passed, 0 failed" "$W/verify-full-$b.log" && pre=$pre,$b; done
OUT=$OUT timeout 130 bash scripts/gpu_ab.sh --builds $pre --impl cuda-generic --rounds 2 \
  --workload h64-fixed --workload h96-uniform
echo "gpu_ab prefill rc=$?"
date -u
tr=wus
for b in wc dsbulk; do grep -q "21 passed, 0 failed" "$W/verify-bwdq-$b.log" && tr=$tr,$b; done
mkdir -p "$OUT/train"
OUT=$OUT/train timeout 110 bash scripts/gpu_ab.sh --builds $tr --impl cuda-generic --rounds 1 --workload train-h64-fixed
echo "gpu_ab train rc=$?"
date -u
mkdir -p "$OUT/ncu-s2p"
OUT=$OUT/ncu-s2p timeout 60 bash scripts/gpu_ab.sh --builds s2p --impl cuda-generic --rounds 0 --ncu prepare_kernel \
  --ncu-count 1 --workload h64-fixed
echo "gpu_ab ncu rc=$?"
date -u
