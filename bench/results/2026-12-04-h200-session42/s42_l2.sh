#!/usr/bin/env bash
# Session 42, call 2: tcepi (tcstage, which call 1 checked and timed, + the grad_tc epilogue's next n8 tile loaded
# before this one's stores) checked whole (backward / stress GPU tests, backward-full); then the training step through
# the torch op beside FLA in one process (bench_torch.py: FLA, kda, kda-saved); last, every launch of one
# train-h64-fixed step under ncu (SpeedOfLight: the backward's kernel-by-kernel times after the change).
# Run as: OUT=$OUT bash .carry/lease/s42_l2.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l2
lease_unpack tcepi
lease_bwd_checks tcepi
lease_checks_done
lease_torch_train tcepi h64-fixed 330
lease_ncu_launches tcepi train-h64-fixed '.*'
(cd "$W" && tar -czf "$OUT/ncu.tgz" ncu-launches-*.txt)
