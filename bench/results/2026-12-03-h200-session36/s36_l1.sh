#!/usr/bin/env bash
# Prepared in session 35 for the next session's first device call (~480 s: run with timeout_s 600). First main35
# (session 35's last code: the products kernel's streaming stores and evict-first operand copies, measured there as
# prodcs2 with identical SASS; chunk_common.cuh's new cp_async16 overload is in every kernel that includes it) through
# the backward / stress GPU tests and backward-quick; then issue #9's training step through the torch op beside FLA
# (kda-bench: backward 6.63 ms, step 8.25, forward-saving step 7.22 at train-h64-fixed; FLA 8.15 in session 35's call
# 1), with the room FLA's Triton compile needs on a fresh machine.
# Run as: OUT=$OUT bash .carry/lease/s36_l1_prepared.sh
#   carry [".carry/lease", ".carry/ab/main35.tar.xz", ".carry/ab/main35.COMMIT", ".whl"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l1
lease_unpack main35
lease_bwd_quick main35
lease_torch_train main35 h64-fixed 430
