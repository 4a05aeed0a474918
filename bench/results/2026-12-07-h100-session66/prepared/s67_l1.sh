#!/usr/bin/env bash
# Prepared in session 66 as the next first call. Session 66 measured the state pass with its new stage clocks: on an
# H100 a 6500-cycle step waits ~750 cycles for its copies (the bytes: DRAM at 83%), and the chain's own path is
# ~5.75 K cycles (products ~2.1 K, splits and plane stores ~3.4 K, slowed by the output warpgroup's products on the
# same shared-memory port), which would bound the pass on an H200. chainreg (its chain's A from registers, ~72 KB a
# step less of shared-memory reads) measured level on an H100 (session 66, call 1). This call:
# 1  the state-pass clocks of main's kernels (stateclk, d617872) and of chainreg rebased on them (chainregclk) at
#    h64- and h96-fixed: does chainreg shorten the chain's path where the bytes hide it;
# 2  gpu_ab main63,chainregpy at h64- and h96-fixed (level on an H100; on an H200 the bytes no longer hide it);
# 3  on an H200: the six workloads beside FLA through main63's op (the last H200 figures are session 50's); on an
#    H100: ncu's full set with source on main63's prepare_kernel (phase 1, not profiled whole since session 60).
# Carries .carry/ab's main63 (d12886f, --python), chainregpy (6fb03d5, --python), stateclk and chainregclk
# (--stage-clocks archives). Run as OUT=$OUT bash .carry/lease/s67_l1.sh with .carry/slim.sh on, carry
# [".carry/lease", ".carry/ab", ".whl", ".carry/triton"] (~56 MB); returns s67_l1.log, clocks.tgz, ab/results.tar,
# and results.tar (H100) or prefill.tgz and the Triton cache's two parts (H200).
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s67_l1
lease_unpack stateclk chainregclk
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lim=${LIMIT:-540}
h200=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -c H200)
lease_clocks stateclk h64-fixed h96-fixed
lease_clocks chainregclk h64-fixed h96-fixed
echo "clocks done at $SECONDS s"
left=$((lim - SECONDS))
[ "$left" -gt 120 ] && left=120
[ "$left" -gt 40 ] && lease_ab main63,chainregpy "$left" h64-fixed h96-fixed
if [ "$h200" != 0 ]; then
  left=$((lim - SECONDS))
  [ "$left" -gt 80 ] && lease_torch_prefill main63 "$left" h64-fixed h96-fixed h64-mixed h96-mixed h64-uniform h96-uniform
elif [ $((lim - SECONDS)) -gt 120 ]; then
  OUT=$OUT timeout $((lim - SECONDS - 10)) bash scripts/gpu_ab.sh --builds main63 --impl cuda-generic --rounds 0 \
    --workload h64-fixed --ncu "prepare_kernel" --ncu-count 1
  echo "gpu_ab --ncu main63 rc=$? at $SECONDS s"
fi
echo "done at $SECONDS s"
date -u
