#!/usr/bin/env bash
# Prepared in session 45: the backward checks of s45_l1.sh's two changes (~360 s + start), one build after the other
# (each: backward / stress GPU tests beside backward-full in four processes). qkfin's backward-full asks bf16
# gradients (--input-dtype-grads): its path runs only for those (chunk_kernels.h grad_tc_finishes_qk).
# Run as: OUT=$OUT bash .carry/lease/s45_l2.sh
# carry [".carry/lease", ".carry/ab/rv3.tar.xz", ".carry/ab/qkfin.tar.xz"] (the archives by name: .carry/ab holds
# four, more than a call carries)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l2
lease_unpack rv3 qkfin
lease_bwd_checks qkfin --input-dtype-grads
lease_checks_done checks-qkfin
W=$(mktemp -d)
lease_bwd_checks rv3
lease_checks_done checks-rv3
