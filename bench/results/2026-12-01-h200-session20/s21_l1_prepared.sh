#!/usr/bin/env bash
# Prepared in session 20 for session 21's first device call (~360 s): the three changes with the largest predicted
# gains, each alone on main (dd9042f); checks, then A/B against wus (690212d, main's code: main differs in comments
# and one wrapped line only).
# s2p (branch s2p, b9034ba): S2b's factors as running products of exp2(g_t): 18 ex2 a thread instead of 64 (97
#   registers, was 115). Predicted -20..-50 us at h64-fixed, -30..-75 at h96; not bit-identical.
# lpt (branch lpt, e8ff093): packed batches' state / reverse chains launched longest sequence first. Predicted
#   h96-mixed -60..-85 us (scripts/models/lpt_order.py: 233 -> 211 chunk-steps), h64-mixed 0; bit-identical (its
#   verifier lines must equal wus's but the timing).
# pdl (branch pdl, 3dd050b): h96-fixed's partial last state-pass wave (30 heads) first, the other heads' phase 1
#   beside it (programmatic dependent launch). Predicted h96-fixed -150..-250 us (ideal model ~-250); nothing else
#   moves (one wave, or packed). Bit-identical. If it fails: the prepare kernel's head offset (hv0) or the
#   launch order; if the bench's graph capture refuses it, the PDL attribute in capture.
# Run as: OUT=$OUT bash .carry/lease/s21_l1_prepared.sh   with carry [".carry/lease", ".carry/ab/wus.tar.xz",
# ".carry/ab/s2p.tar.xz", ".carry/ab/lpt.tar.xz", ".carry/ab/pdl.tar.xz"] (all of .carry/ab with the checkout would
# pass the 64 MiB a call carries).
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l1.log") 2>&1
date -u
W=$(mktemp -d)
source scripts/lease_lib.sh
lease_unpack wus s2p lpt pdl
SF=14035002217949444255 SB=15368221980386543344
F='Wgmma*:Own/CudaHopper.*:Cases/CudaHopperBackward.*:CudaBehaviour.*:Backends/CudaBackwardDeterminism.*'
pids=()
for b in s2p lpt pdl; do
  lease_run verify-full-$b $b 4 240 ./kda-verify --suite full --impl cuda-generic --seed $SF & pids+=($!)
  lease_run tests-$b $b 1 200 ./kda_gpu_tests --gtest_filter="$F" & pids+=($!)
done
for b in s2p lpt; do
  lease_run verify-bwdq-$b $b 1 200 ./kda-verify --suite backward-quick --impl cuda-generic --seed $SB & pids+=($!)
done
wait "${pids[@]}"  # never a bare wait (the tee above)
grep -hE "FAILED|Failure|FAIL " "$W"/*.log | head -20
(cd "$W" && tar -czf "$OUT/checks.tgz" .)
date -u
ok() { grep -q "39 passed, 0 failed" "$W/verify-full-$1.log"; }
ab() {  # name timeout builds workloads...
  local n=$1 t=$2 b=$3; shift 3
  local w=(); for x in "$@"; do w+=(--workload "$x"); done
  mkdir -p "$OUT/$n"
  OUT=$OUT/$n timeout "$t" bash scripts/gpu_ab.sh --builds "$b" --impl cuda-generic --rounds 2 "${w[@]}"
  echo "gpu_ab $n rc=$?"; date -u
}
ok s2p && ab s2p 110 wus,s2p h64-fixed h96-uniform
ok lpt && ab lpt 80 wus,lpt h96-mixed h64-mixed
ok pdl && ab pdl 60 wus,pdl h96-fixed
