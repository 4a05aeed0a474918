#!/usr/bin/env bash
# Session 34, call 1: tcpass (chunk_grad_tc.cu: a tame chunk's dq, dk, dg on tensor cores in a launch of their own, a
# CTA per (chunk, value head, 64-channel half) at two an SM, every exponent term elementwise in the epilogue and dg
# wholly by the difference form; chunk_grad.cu copies them and keeps its spanning sums for steep chunks) against
# main33 (a3e1bec: main's backward, tcgrad). backward-quick on both at one seed (new figures expected: the exponent
# terms' dg now a difference too), tcpass's backward / stress GPU tests and backward-full whole, then the A/B at
# train-h64-fixed and the backward's launches under ncu.
# Run as: OUT=$OUT bash .carry/lease/s34_l1.sh
#   carry [".carry/lease", ".carry/ab/main33.tar.xz", ".carry/ab/tcpass.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l1
lease_unpack main33 tcpass
seed=$(od -An -N8 -tu8 /dev/urandom | tr -d " ")
echo "backward-quick seed $seed"
lease_run bq-main33 main33 4 120 ./kda-verify --impl cuda-generic --suite backward-quick --seed "$seed" & p1=$!
lease_run bq-tcpass tcpass 4 120 ./kda-verify --impl cuda-generic --suite backward-quick --seed "$seed" & p2=$!
wait $p1 $p2
for b in main33 tcpass; do echo "-- $b"; grep -hE "^bwd_|kda-verify:" "$W/bq-$b.log" | cut -c1-200; done
date -u
lease_bwd_checks tcpass
date -u
mkdir -p "$OUT/ab"
OUT=$OUT/ab timeout 200 bash scripts/gpu_ab.sh --builds main33,tcpass --impl cuda-generic --rounds 2 \
  --workload train-h64-fixed
echo "gpu_ab rc=$?"; date -u
lease_ncu_launches tcpass train-h64-fixed 'grad'
lease_checks_done
