#!/usr/bin/env bash
# Prepared in session 21 for session 22's second device call (~520 s): the training step. wtma's (s22_l1) effect on
# the backward's recompute, and two backward changes, each alone on main, checked and timed against m21.
# rec (branch rec, 44aa35b): the backward's recompute runs the forward's launches (launch_forward_phases): at
#   h96-fixed the partial last state-pass wave's overlap (session 21's pdl) instead of a 32-column mma.sync tail.
#   Predicted train-h96-fixed backward -150..-250 us; h64 and every backward-quick case launch what they did (their
#   lines must equal m21's, session 21's call3/checks.tgz verify-bwdq.log, but the timing).
# recsave (branch recsave, 70c127f): the recompute's state pass copies no Qg / A_qk (no output) and its chain writes
#   the saves (chunk-start states, V_new) into those free buffers as fp32 TMA boxes, stored by the idle output
#   warpgroup with TMA; the chain stored 48 KB a chunk itself (recompute pass 729 us against the forward's 444).
#   Predicted train-h64-fixed backward -150..-280 us; bit-identical (the same values to the same bytes).
# revov (branch revov, ac7f8cd): the reverse pass's partial last wave (h96-fixed: 30 heads) runs last with the other
#   heads' products kernel beside it (programmatic dependent launch), instead of a 32-column mma.sync tail. Predicted
#   train-h96-fixed backward -250..-500 us; h64 and backward-quick launch what they did (bit-identical).
# The h96 paths of rec and revov: kda-bench's train-h96-fixed gradients (verified before timing) and m22's
#   backward-full case one_sequence_96_heads_k128 (s22_l3).
# Session 22 edit: wtma lost in call 1 (prefill +4..+40 us), so not timed here; call 1's decode A/B did not run (its
# gate waited for gtest's PASSED line, and the b512 reference cases outlast 200 s; every test that ran passed and
# both decode-full verifier runs passed 19/19), so the decode A/B m21/dred/dred4 runs here first.
# Run as: OUT=$OUT bash .carry/lease/s22_l2.sh   with carry [".carry/lease", ".carry/ab/m21.tar.xz",
# ".carry/ab/dred.tar.xz", ".carry/ab/dred4.tar.xz", ".carry/ab/rec.tar.xz", ".carry/ab/recsave.tar.xz",
# ".carry/ab/revov.tar.xz"].
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l2
lease_unpack m21 dred dred4 rec recsave revov
SB=15368221980386543344
F='Cases/CudaHopperBackward.*:Backends/CudaBackwardDeterminism.*:Wgmma*'
pids=()
for b in rec recsave revov; do
  lease_run verify-bwdq-$b $b 2 150 ./kda-verify --suite backward-quick --impl cuda-generic --seed $SB & pids+=($!)
  lease_run tests-$b $b 2 150 ./kda_gpu_tests --gtest_filter="$F" & pids+=($!)
done
lease_run verify-bwdq-fresh-recsave recsave 2 150 ./kda-verify --suite backward-quick --impl cuda-generic & pids+=($!)
wait "${pids[@]}"  # never a bare wait (the tee above)
lease_checks_done
mkdir -p "$OUT/dec"
OUT=$OUT/dec timeout 150 bash scripts/gpu_ab.sh --builds m21,dred,dred4 --impl cuda-generic --rounds 2 \
  --workload decode-h32-b32 --workload decode-h32-b128 --workload decode-h32-b256 --workload decode-h12-b128 \
  --workload decode-h32-b32-bf16
echo "gpu_ab decode rc=$?"; date -u
tr=m21
lease_passed verify-bwdq-recsave && lease_passed verify-bwdq-fresh-recsave && tr=$tr,recsave
mkdir -p "$OUT/train"
OUT=$OUT/train timeout 120 bash scripts/gpu_ab.sh --builds $tr --impl cuda-generic --rounds 1 --workload train-h64-fixed
echo "gpu_ab train rc=$?"; date -u
t96=m21
for b in rec revov; do lease_passed verify-bwdq-$b && t96=$t96,$b; done
if [ "$t96" != m21 ]; then
  mkdir -p "$OUT/train96"
  OUT=$OUT/train96 timeout 170 bash scripts/gpu_ab.sh --builds $t96 --impl cuda-generic --rounds 1 \
    --workload train-h96-fixed
  echo "gpu_ab train96 rc=$?"; date -u
fi
