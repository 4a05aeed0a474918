#!/usr/bin/env bash
# Session 34, call 2: tcrows (tcpass, call 1's tensor-core pass for tame chunks, plus chunk_grad_rows.cu: the tame
# chunks' finishing a row a warp at 3 CTAs an SM, reading tcpass's dq_hat, dk_hat, dg from the product tile;
# chunk_grad.cu runs the steep chunks alone) against main33 (a3e1bec: tcgrad). backward-quick on both at one seed,
# tcrows's backward / stress GPU tests and backward-full whole, the A/B at train-h64-fixed, the gradient launches
# under ncu and the two new kernels' summary sections. tcrows8: tcrows with the tensor-core pass's staging issuing
# all 8 of a warp's rows' loads at once (timed only; the same operations in the same order).
# Run as: OUT=$OUT bash .carry/lease/s34_l2.sh
#   carry [".carry/lease", ".carry/ab/main33.tar.xz", ".carry/ab/tcrows.tar.xz", ".carry/ab/tcrows8.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l2
lease_unpack main33 tcrows tcrows8
seed=$(od -An -N8 -tu8 /dev/urandom | tr -d " ")
echo "backward-quick seed $seed"
lease_run bq-main33 main33 4 120 ./kda-verify --impl cuda-generic --suite backward-quick --seed "$seed" & p1=$!
lease_run bq-tcrows tcrows 4 120 ./kda-verify --impl cuda-generic --suite backward-quick --seed "$seed" & p2=$!
wait $p1 $p2
for b in main33 tcrows; do echo "-- $b"; grep -hE "^bwd_|kda-verify:" "$W/bq-$b.log" | cut -c1-200; done
date -u
lease_bwd_checks tcrows
date -u
mkdir -p "$OUT/ab"
OUT=$OUT/ab timeout 320 bash scripts/gpu_ab.sh --builds main33,tcrows,tcrows8 --impl cuda-generic --rounds 2 \
  --workload train-h64-fixed
echo "gpu_ab rc=$?"; date -u
lease_ncu_launches tcrows train-h64-fixed 'grad'
lease_ncu tcrows train-h64-fixed 'grad_tc_kernel'
lease_ncu tcrows train-h64-fixed 'grad_rows_kernel'
cp "$W"/ncu-*.txt "$OUT/" 2>/dev/null
lease_checks_done
