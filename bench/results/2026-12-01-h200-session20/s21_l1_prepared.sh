#!/usr/bin/env bash
# Prepared in session 20 for session 21's first device call (~420 s): wus3 (37fc0e7, +22..+45 us, reverted) in its
# three parts, each alone on main, and two new changes; checks, then A/B against main.
# wus: the baseline archive (690212d; main dd9042f differs from it in comments and one wrapped line only).
# wa (branch wa): S5c's bulk copies issued by one lane a warp (wus's 32-lane R2UR loop gone).
# wb (branch wb): S4's A_qk planes in 8-byte stores, four entries a thread and step.
# wc (branch wc): the 3xTF32 branch (the backward's recompute, a forward saving for it) staged as the bf16x3 one.
# s2p (branch s2p): S2b's factors as running products of exp2(g_t): 18 ex2 a thread instead of 64. Predicted
#   -20..-50 us at h64-fixed, -30..-75 at h96 (MUFU work ~4% of the prepare kernel's cycles); not bit-identical.
# lpt (branch lpt): packed batches' state / reverse pass chains launched longest sequence first. Predicted h96-mixed
#   -60..-85 us (scripts/models/lpt_order.py: 233 -> 211 chunk-steps), h64-mixed and the others unchanged; values
#   bit-identical (its verifier lines must equal wus's but the timing).
# Predicted for wa / wb: at most +-20 us each; one of them (or wc's changed register allocation, which does not
# touch the forward) carries wus3's loss. wc: train-h64 backward -20..-60 (the recompute's scattered stores gone),
# timed in s21_l2.
# Run as: OUT=$OUT bash .carry/lease/s21_l1_prepared.sh   with carry [".carry/lease", ".carry/ab"] (.carry/ab holding
# wus, wa, wb, wc, s2p, lpt only: ~33 MB).
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l1.log") 2>&1
date -u
W=$(mktemp -d)
source scripts/lease_lib.sh
lease_unpack wus wa wb wc s2p lpt
SF=14035002217949444255 SB=15368221980386543344
F='Wgmma*:Own/CudaHopper.*:Cases/CudaHopperBackward.*:CudaBehaviour.*:Backends/CudaBackwardDeterminism.*'
pids=()
for b in wa wb s2p lpt; do
  lease_run verify-full-$b $b 3 240 ./kda-verify --suite full --impl cuda-generic --seed $SF & pids+=($!)
done
for b in wc s2p lpt; do
  lease_run verify-bwdq-$b $b 1 200 ./kda-verify --suite backward-quick --impl cuda-generic --seed $SB & pids+=($!)
done
for b in wa s2p lpt; do lease_run tests-$b $b 1 200 ./kda_gpu_tests --gtest_filter="$F" & pids+=($!); done
wait "${pids[@]}"  # never a bare wait (the tee above)
grep -hE "FAILED|Failure|FAIL " "$W"/*.log | head -20
(cd "$W" && tar -czf "$OUT/checks.tgz" .)
date -u
pre=wus
for b in wa wb s2p; do grep -q "39 passed, 0 failed" "$W/verify-full-$b.log" && pre=$pre,$b; done
OUT=$OUT timeout 130 bash scripts/gpu_ab.sh --builds $pre --impl cuda-generic --rounds 2 \
  --workload h64-fixed --workload h96-uniform
echo "gpu_ab prefill rc=$?"
date -u
if grep -q "39 passed, 0 failed" "$W/verify-full-lpt.log"; then
  mkdir -p "$OUT/lpt"
  OUT=$OUT/lpt timeout 80 bash scripts/gpu_ab.sh --builds wus,lpt --impl cuda-generic --rounds 2 \
    --workload h96-mixed --workload h64-mixed
  echo "gpu_ab lpt rc=$?"
fi
date -u
