#!/usr/bin/env bash
# Prepared in session 29 for the next session's first device call (~450 s: run with timeout_s 590), not yet run.
# Builds, made on the development machine first (archives and branches do not survive a new machine):
#   P=bench/results/2026-12-02-h200-session29/patches
#   git worktree add /tmp/wt_h -b p4hoist main && git -C /tmp/wt_h am "$PWD/$P/0001-"*.patch
#   git worktree add /tmp/wt_f -b p4fold p4hoist && git -C /tmp/wt_f am "$PWD/$P/0002-"*.patch
#   then scripts/gpu_build.sh on main, p4hoist and p4fold (by hash: the branches are checked out in worktrees), each
#   archive copied to .carry/ab/{main,p4hoist,p4fold}.tar.xz.
# p4hoist: P4's diagonal blocks load the channel's k and g of the block once, not once a pair (the compiler reloaded
# them after each row's DQ / DK stores): the block's body 2211 -> 2018 SASS instructions, the bf16 / bounded
# instance 7928 -> 7800 and its 8-byte spill gone; the same operations in the same order (main's figures expected).
# p4fold (on p4hoist): beta_r once a row instead of on every pair's dA (diagonal blocks and block pairs), dk's diagonal
# terms sharing k_c D with dq's: 7800 -> 7536 instructions; a reassociation, so it needs backward-full (run with fp32
# gradients: the generic instance has the same P4, and bf16 gradients would hide errors of 1e-4).
# Checks: backward-quick main / p4hoist at one fresh seed, with bf16 and with fp32 gradients (the same figures); p4fold's
# backward-full and backward / stress GPU tests. Then the A/B at train-h64-fixed (2 rounds) and ncu launches of the
# gradient kernel.
# Run as: OUT=$OUT bash .carry/lease/s30_l1.sh   carry [".carry/lease", ".carry/ab/main.tar.xz",
# ".carry/ab/p4hoist.tar.xz", ".carry/ab/p4fold.tar.xz"].
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l1
lease_unpack main p4hoist p4fold
lease_same_figures "backward-quick --input-dtype-grads" main p4hoist
lease_same_figures backward-quick main p4hoist
lease_bwd_checks p4fold
lease_checks_done
mkdir -p "$OUT/ab"
OUT=$OUT/ab timeout 240 bash scripts/gpu_ab.sh --builds main,p4hoist,p4fold --impl cuda-generic --rounds 2 \
  --workload train-h64-fixed
echo "gpu_ab rc=$?"; date -u
for b in main p4hoist p4fold; do lease_ncu_launches $b train-h64-fixed 'grad_kernel'; done
cp "$W"/ncu-*.txt "$OUT/" 2>/dev/null
date -u
