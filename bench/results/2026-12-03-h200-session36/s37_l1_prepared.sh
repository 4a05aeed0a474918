#!/usr/bin/env bash
# Prepared in session 36 for the next session's first device call (~480 s, at most ~590: timeout_s 600). (1) Where
# grad_rows_kernel's 0.72 ms goes: ncu by line of one launch at train-h64-fixed on main35 (session 36's two changes
# to it lost: it is bound by its own instruction stream, 513 M warp instructions at 1.64 eligible warps a scheduler;
# read the CSV with scripts/ncu_stages.py against main35's nvdisasm). (2) rsq (branch s37-rsq, 78a5789): the device's
# fp32 inverse L2 norm as rsqrtf instead of the IEEE square root and division (grad_rows' row loop 1293 -> 1201 static
# SASS instructions, most of the removed ones slow paths: expect a few per cent of grad_rows at most, and as much again
# from grad_tc's staging and the forward's phase 1, which run the same code): the A/B at train-h64-fixed and h64-fixed
# against main35, then its GPU tests beside the forward quick suite and backward-quick. backward-full goes in the call
# that follows if rsq is kept.
# Run as: OUT=$OUT bash .carry/lease/s37_l1_prepared.sh
#   carry [".carry/lease", ".carry/ab/main35.tar.xz", ".carry/ab/rsq.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l1
lease_unpack main35 rsq
mkdir -p "$OUT/rows"
OUT=$OUT/rows timeout 150 bash scripts/gpu_ab.sh --builds main35 --impl cuda-generic --rounds 0 \
  --ncu grad_rows_kernel --ncu-count 1 --workload train-h64-fixed
echo "ncu grad_rows_kernel rc=$?"; date -u
lease_ab main35,rsq 320 train-h64-fixed h64-fixed
lease_run tests rsq 2 120 ./kda_gpu_tests & p1=$!
lease_run quick rsq 2 120 ./kda-verify --impl cuda-generic --suite quick & p2=$!
lease_run bq rsq 2 120 ./kda-verify --impl cuda-generic --suite backward-quick & p3=$!
wait $p1 $p2 $p3
for n in quick bq; do lease_passed $n && echo "rsq: $n passed" || echo "rsq: $n FAILED"; done
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/tests.log" | head -20
lease_checks_done
