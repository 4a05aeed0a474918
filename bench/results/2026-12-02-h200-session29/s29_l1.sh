#!/usr/bin/env bash
# Prepared in session 28 for the next session's first device call (~420 s: run with timeout_s 590), not yet run.
# Builds, made on the development machine first (the archives do not survive a new machine):
#   P=bench/results/2026-12-02-h200-session28/patches
#   git worktree add /tmp/wt_sp -b gradspec main && git -C /tmp/wt_sp am \
#     "$PWD/$P/0001-Gradient-pass-instances-built-for-all-bf16-inputs-an.patch"
#   then scripts/gpu_build.sh on main and on gradspec, each archive copied to .carry/ab/{main,gradspec}.tar.xz.
# gradspec: the gradient pass built as instances for all-bf16 inputs and gradients with each gate mode (the generic
# instance for the rest): the same operations in the same order (main's figures expected at backward-quick), 18%
# less code in the instance train-h64-fixed runs (bf16, bounded gate; static SASS 9712 -> 7928 instructions), the
# lever session 28's static reading points at (the pass's time tracked its code size in all five builds measured).
# Checks: backward-quick main / gradspec at one fresh seed; gradspec's backward-full (its bf16 instances on the
# workload cases, the generic one on the fp32 / fp16 cases) and backward / stress GPU tests; then the A/B at
# train-h64-fixed (2 rounds) and train-h96-fixed (1 round), and the gradient kernel's launches under ncu.
# Run as: OUT=$OUT bash .carry/lease/s29_l1.sh   carry [".carry/lease", ".carry/ab/main.tar.xz",
# ".carry/ab/gradspec.tar.xz"].
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l1
lease_unpack main gradspec
lease_same_figures backward-quick main gradspec
lease_bwd_checks gradspec
lease_checks_done
mkdir -p "$OUT/ab" "$OUT/ab96"
OUT=$OUT/ab timeout 150 bash scripts/gpu_ab.sh --builds main,gradspec --impl cuda-generic --rounds 2 \
  --workload train-h64-fixed
echo "gpu_ab rc=$?"; date -u
OUT=$OUT/ab96 timeout 120 bash scripts/gpu_ab.sh --builds main,gradspec --impl cuda-generic --rounds 1 \
  --workload train-h96-fixed
echo "gpu_ab rc=$?"; date -u
for b in main gradspec; do lease_ncu_launches $b train-h64-fixed 'grad_kernel'; done
cp "$W"/ncu-*.txt "$OUT/" 2>/dev/null
date -u
