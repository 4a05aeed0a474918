#!/usr/bin/env bash
# Prepared in session 66 as the next first call. Session 66 measured the state pass with its new stage clocks: on an
# H100 a 6500-cycle step waits ~750 cycles for its copies (the bytes: DRAM at 83%), and the chain's own path is
# ~5.75 K cycles (products ~2.1 K, splits and plane stores ~3.4 K, slowed by the output warpgroup's products on the
# same shared-memory port), which would bound the pass on an H200. Two changes shorten that path, and on an H100 the
# copy waits would absorb what they save, so the clocks are what judge them there:
#   chainreg (branch chainregclk: the chain's A from registers, ~72 KB a step less of shared-memory reads; level on an
#   H100 in session 66, call 1, and checked then: full 40/40, backward-quick 22/22, GPU tests 208/208);
#   uahead (branch uahead: U's loads issued while W S^T runs, not after it; never run).
# All three archives are --stage-clocks builds on main's kernels (stateclk d617872, chainregclk 12dec6d, uaheadclk
# 29d6089), so their times compare with the same (idle) stamp code. This call:
# 1  uaheadclk's checks: kda-verify full and the GPU tests but backward / stress / decode, in parallel;
# 2  the state-pass clocks of stateclk, chainregclk and uaheadclk at h64- and h96-fixed;
# 3  gpu_ab stateclk,chainregclk,uaheadclk at h64- and h96-fixed, 2 rounds;
# 4  on an H200: the six workloads beside FLA through main63's op (the last H200 figures are session 50's); on an
#    H100: ncu's full set with source on main63's prepare_kernel (phase 1, not profiled whole since session 60).
# Carries .carry/ab's main63 (d12886f, --python), stateclk, chainregclk and uaheadclk. Run as OUT=$OUT bash
# .carry/lease/s67_l1.sh with .carry/slim.sh on and timeout_s 600, carry [".carry/lease", ".carry/ab", ".whl",
# ".carry/triton"] (~56 MB); returns s67_l1.log, final.tgz, clocks.tgz, ab/results.tar, and results.tar (H100) or
# prefill.tgz and the Triton cache's two parts (H200): 7 files at most.
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s67_l1
lease_unpack stateclk chainregclk uaheadclk
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lim=${LIMIT:-540}
h200=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -c H200)
pids=()
lease_run full-ua uaheadclk 4 200 ./kda-verify --impl cuda-generic --suite full & pids+=($!)
lease_run gtests-ua uaheadclk 4 200 ./kda_gpu_tests --gtest_filter='-*Backward*:*Stress*:*Decode*' & pids+=($!)
wait "${pids[@]}"
echo "checks done at $SECONDS s"
grep -hE " FAIL |kda-verify:" "$W/full-ua.log" | cut -c1-200 | head -8
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/gtests-ua.log" | head -5
lease_checks_done final
lease_clocks stateclk h64-fixed h96-fixed
lease_clocks chainregclk h64-fixed h96-fixed
lease_passed full-ua && lease_clocks uaheadclk h64-fixed h96-fixed
echo "clocks done at $SECONDS s"
builds=stateclk,chainregclk
lease_passed full-ua && builds=$builds,uaheadclk
left=$((lim - SECONDS))
[ "$left" -gt 150 ] && left=150
[ "$left" -gt 40 ] && lease_ab "$builds" "$left" h64-fixed h96-fixed
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
