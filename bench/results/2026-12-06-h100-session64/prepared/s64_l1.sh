#!/usr/bin/env bash
# Session 64: s63_c32.sh with c32py (the branch head 1691d11, c32s3's kernels, built with --python) for c32s3.
# Halves (branch c32: the forward's tiles as two 32-token chunks where the wgmma state pass runs with no
# saves; docs/hopper.md "Chunks of 32 tokens") against main63 (d12886f, main's kernels) on one machine:
#   c32    phase 1 forms no block coupling the halves, S4 stops after stage 1, S5b multiplies T's diagonal blocks
#          only; the state pass takes each tile in two masked steps (each product of a tile run twice)
#   c32py  (c32s3) c32 with S3's idle warps taking half of each factored diagonal block's channels
# 1  checks of c32py, in parallel: kda-verify --suite full under cuda-generic, the GPU tests (but backward / stress /
#    decode) and backward-quick (the backward keeps 64-token tiles, but their layout grew by a decay row)
# 2  gpu_ab of main63, c32 and c32py (if c32py's full suite passed), h64-fixed and h96-fixed, 2 rounds, every run
#    verified (gpu_ab's own check of each run: c32's only one)
# 3  ncu, every prepare / state_wgmma launch of one h64-fixed step of main63 and c32py: where the time went
# Run as OUT=$OUT bash .carry/lease/s63_c32.sh with .carry/slim.sh on, carry [".carry/lease",
# ".carry/ab/main63.tar.xz", ".carry/ab/main63.COMMIT", ".carry/ab/c32.tar.xz", ".carry/ab/c32.COMMIT",
# ".carry/ab/c32py.tar.xz", ".carry/ab/c32py.COMMIT"]; ~300 s.
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s64_l1
lease_unpack main63 c32 c32py
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
pids=()
lease_run full-c32py c32py 4 280 ./kda-verify --impl cuda-generic --suite full & pids+=($!)
lease_run gtests-c32py c32py 4 280 ./kda_gpu_tests --gtest_filter='-*Backward*:*Stress*:*Decode*' & pids+=($!)
lease_run bq-c32py c32py 3 200 ./kda-verify --impl cuda-generic --suite backward-quick & pids+=($!)
wait "${pids[@]}"
echo "checks done at $SECONDS s"
for n in full-c32py bq-c32py; do grep -hE " FAIL |kda-verify:|near_identical_keys_beta_at_2" "$W/$n.log" | cut -c1-230 | head -12; done
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/gtests-c32py.log" | head
if lease_passed full-c32py; then
  lease_ab main63,c32,c32py 200 h64-fixed h96-fixed
else
  echo "c32py's full suite failed: no timing"
  lease_run full-c32 c32 4 200 ./kda-verify --impl cuda-generic --suite full
fi
for b in main63 c32py; do lease_ncu_launches $b h64-fixed "prepare_kernel|state_wgmma"; done
lease_checks_done final
echo "done at $SECONDS s"
date -u
