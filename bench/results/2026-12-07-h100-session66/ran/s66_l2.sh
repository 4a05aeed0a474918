#!/usr/bin/env bash
# Session 66, call 2. Call 1 found chainreg level with main, the state pass at 83% of DRAM's peak and 86% of L2's
# (SpeedOfLight, h64-fixed, H100), and statediag's mode 7 (no loads, no products) still at 215 us: the step's
# skeleton is ~2.9 K cycles of its ~5.5 K. This call:
# 1  the state pass's stage clocks (stateclk: KDA_STAGE_CLOCKS, gpu_build.sh --stage-clocks) at h64- and h96-fixed:
#    where each warpgroup's step goes, measured whole;
# 2  fencechain (only the chain warpgroup fences its plane stores for the async proxy each chunk): kda-verify full and
#    the GPU tests but backward / stress / decode in parallel, then gpu_ab main63,fencechain at h64- and h96-fixed;
# 3  while LIMIT (540 s) allows: ncu's full set with source on main63's state_wgmma and prepare_kernel (gpu_ab.sh
#    --ncu), then statediag's state pass in mode 7 (not on an H200); on an H200, the six workloads beside FLA.
# Run as OUT=$OUT bash .carry/lease/s66_l2.sh with .carry/slim.sh on, carry [".carry/lease", ".carry/ab", ".whl",
# ".carry/triton"]; returns s66_l2.log, clocks.tgz, final.tgz, ab/results.tar and results.tar, results-2.tar (and
# on an H200 prefill.tgz and the Triton cache's parts): at most 8 files.
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s66_l2
lease_unpack stateclk fencechain
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lim=${LIMIT:-540}
h200=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -c H200)
lease_clocks stateclk h64-fixed h96-fixed
echo "clocks done at $SECONDS s"
pids=()
lease_run full-fc fencechain 4 200 ./kda-verify --impl cuda-generic --suite full & pids+=($!)
lease_run gtests-fc fencechain 4 200 ./kda_gpu_tests --gtest_filter='-*Backward*:*Stress*:*Decode*' & pids+=($!)
wait "${pids[@]}"
echo "checks done at $SECONDS s"
grep -hE " FAIL |kda-verify:" "$W/full-fc.log" | cut -c1-200 | head -8
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/gtests-fc.log" | head -5
lease_checks_done final
left=$((lim - SECONDS))
[ "$left" -gt 100 ] && left=100
lease_passed full-fc && [ "$left" -gt 40 ] && lease_ab main63,fencechain "$left" h64-fixed h96-fixed
if [ $((lim - SECONDS)) -gt 150 ]; then
  OUT=$OUT timeout $((lim - SECONDS - 20)) bash scripts/gpu_ab.sh --builds main63 --impl cuda-generic --rounds 0 \
    --workload h64-fixed --ncu "state_wgmma|prepare_kernel" --ncu-count 2
  echo "gpu_ab --ncu main63 rc=$? at $SECONDS s"
fi
if [ "$h200" = 0 ] && [ $((lim - SECONDS)) -gt 90 ]; then  # on an H200 the prefill's files take its place
  KDA_STATE_DIAG=7 OUT=$OUT timeout $((lim - SECONDS - 10)) bash scripts/gpu_ab.sh --builds statediag \
    --impl cuda-generic --rounds 0 --workload h64-fixed --ncu "state_wgmma" --ncu-count 1
  echo "gpu_ab --ncu statediag mode 7 rc=$? at $SECONDS s"
fi
if [ "$h200" != 0 ]; then
  left=$((lim - SECONDS))
  [ "$left" -gt 80 ] && lease_torch_prefill main63 "$left" h64-fixed h96-fixed h64-mixed h96-mixed h64-uniform h96-uniform
fi
echo "done at $SECONDS s"
date -u
