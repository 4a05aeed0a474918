#!/usr/bin/env bash
# Session 33, call 2: tcgrad (the gradient pass's pair products of a tame chunk on tensor cores, 3xTF32 mma.sync on
# every warp, dg's pair part as the reverse sum of their difference; steep chunks keep P4's spanning sums; the pass's
# shared arrays swizzled) against main (32a25f5's kernels: the backward is main's). First backward-quick on both at
# one seed (fp32 gradients: the generic instance), then the A/B at train-h64-fixed (bf16 / bounded instance), the
# gradient kernel's launches under ncu, then tcgrad's backward / stress GPU tests and backward-full whole.
# Run as: OUT=$OUT bash .carry/lease/s33_l2.sh   carry [".carry/lease", ".carry/ab/main.tar.xz", ".carry/ab/tcgrad.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l2
lease_unpack main tcgrad
seed=$(od -An -N8 -tu8 /dev/urandom | tr -d " ")
echo "backward-quick seed $seed"
lease_run bq-main main 4 120 ./kda-verify --impl cuda-generic --suite backward-quick --seed "$seed" & p1=$!
lease_run bq-tcgrad tcgrad 4 120 ./kda-verify --impl cuda-generic --suite backward-quick --seed "$seed" & p2=$!
wait $p1 $p2
for b in main tcgrad; do echo "-- $b"; grep -hE "^bwd_|kda-verify:" "$W/bq-$b.log" | cut -c1-200; done
date -u
mkdir -p "$OUT/ab"
OUT=$OUT/ab timeout 200 bash scripts/gpu_ab.sh --builds main,tcgrad --impl cuda-generic --rounds 2 \
  --workload train-h64-fixed
echo "gpu_ab rc=$?"; date -u
lease_ncu_launches tcgrad train-h64-fixed 'grad_kernel'
date -u
lease_bwd_checks tcgrad
lease_checks_done
