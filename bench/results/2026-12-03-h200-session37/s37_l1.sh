#!/usr/bin/env bash
# Session 37, call 1 (~350 s): (1) ncu by line of grad_rows_kernel (train-h64-fixed) and of prepare_kernel (phase 1,
# h64-fixed) on main37 (= main's kernels, session 35's), read afterwards with scripts/ncu_stages.py; (2) the A/B of
# rsq (the device's fp32 inverse L2 norm by rsqrtf) against main37 at train-h64-fixed and h64-fixed, 2 rounds;
# (3) both builds' backward-quick figures at one seed with bf16 gradients, and rsq's forward quick suite.
# Run as: OUT=$OUT bash .carry/lease/s37_l1.sh
#   carry [".carry/lease", ".carry/ab/main37.tar.xz", ".carry/ab/rsq.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l1
lease_unpack main37 rsq
mkdir -p "$OUT/rows" "$OUT/prep"
OUT=$OUT/rows timeout 150 bash scripts/gpu_ab.sh --builds main37 --impl cuda-generic --rounds 0 \
  --ncu grad_rows_kernel --ncu-count 1 --workload train-h64-fixed
echo "ncu grad_rows_kernel rc=$?"; date -u
OUT=$OUT/prep timeout 150 bash scripts/gpu_ab.sh --builds main37 --impl cuda-generic --rounds 0 \
  --ncu prepare_kernel --ncu-count 1 --workload h64-fixed
echo "ncu prepare_kernel rc=$?"; date -u
lease_run quick rsq 2 120 ./kda-verify --impl cuda-generic --suite quick & p1=$!
lease_same_figures "backward-quick --input-dtype-grads" main37 rsq
wait $p1
lease_passed quick && echo "rsq: quick passed" || echo "rsq: quick FAILED"
lease_ab main37,rsq 260 train-h64-fixed h64-fixed
lease_checks_done
