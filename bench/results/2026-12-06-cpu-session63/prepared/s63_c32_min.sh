#!/usr/bin/env bash
# Session 63, the least form of s63_c32.sh for a call with ~160 s of budget left: c32s3's full suite under
# cuda-generic (110 s at most), then (if it passed) gpu_ab of main63 and c32s3 at h64-fixed, 1 round, every run
# verified. Run as OUT=$OUT bash .carry/lease/s63_c32_min.sh with .carry/slim.sh on, carry [".carry/lease",
# ".carry/ab/main63.tar.xz", ".carry/ab/main63.COMMIT", ".carry/ab/c32s3.tar.xz", ".carry/ab/c32s3.COMMIT"].
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s63_c32_min
lease_unpack main63 c32s3
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lease_run full-c32s3 c32s3 12 110 ./kda-verify --impl cuda-generic --suite full
echo "checks done at $SECONDS s"
grep -hE " FAIL |kda-verify:|near_identical_keys_beta_at_2" "$W/full-c32s3.log" | cut -c1-230 | head -12
if lease_passed full-c32s3; then
  mkdir -p "$OUT/ab"
  OUT=$OUT/ab timeout 80 bash scripts/gpu_ab.sh --builds main63,c32s3 --impl cuda-generic --rounds 1 \
    --workload h64-fixed
  echo "gpu_ab rc=$?"
fi
lease_checks_done final
echo "done at $SECONDS s"
date -u
