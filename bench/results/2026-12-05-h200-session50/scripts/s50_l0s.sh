#!/usr/bin/env bash
# Session 50, s50_l0.sh trimmed to the budget left after ten refused tries (283 s): aqk2's forward checks
# (lease_fwd_checks), then gpu_ab main50,aqk2 at h64-fixed only (2 rounds, 90 s limit). ~170 s + start.
# Run as: OUT=$OUT bash .carry/lease/s50_l0s.sh
# carry [".carry/lease", ".carry/ab/main50.tar.xz", ".carry/ab/aqk2.tar.xz", ".carry/ab/main50.COMMIT", ".carry/ab/aqk2.COMMIT"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s50_l0s
lease_unpack main50 aqk2
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
if lease_fwd_checks aqk2; then
  lease_ab main50,aqk2 90 h64-fixed
else
  echo "aqk2 failed its forward checks: no timing"
fi
