#!/usr/bin/env bash
# Prepared in session 49: aqk2 (branch aqk2 = 92a7dad on main d17a9f8, archive .carry/ab/aqk2 built from e8734d0,
# the same kernel code on 70d0206: a plain forward's A_qk with the query's
# fragment rounded once to tf32 and the keys' split, two mma a product instead of 3xTF32's three; the CPU model keeps
# 3xTF32's figures on the probe near_identical_keys_beta_at_2) against main50 (e71582d, built this session: the kernels of 70d0206). ~480 s + start.
#   1  aqk2's forward checks (lease_fwd_checks: kda-verify --suite full with the probe, the forward GPU tests; its
#      backward instances keep 3xTF32, main's code)
#   2  if they pass: gpu_ab main50,aqk2 at h64-fixed and h96-fixed (aqk3 cost +1.5% / +2.1% there on an H100)
# Run as: OUT=$OUT bash .carry/lease/s50_l0.sh
# carry [".carry/lease", ".carry/ab/main50.tar.xz", ".carry/ab/aqk2.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s50_l0
lease_unpack main50 aqk2
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
if lease_fwd_checks aqk2; then
  lease_ab main50,aqk2 200 h64-fixed h96-fixed
else
  echo "aqk2 failed its forward checks: no timing"
fi
