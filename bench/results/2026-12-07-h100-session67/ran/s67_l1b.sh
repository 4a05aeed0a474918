#!/usr/bin/env bash
# Session 67's first call (replaces the prepared s67_l1.sh: uahead and chainreg alone left for later, two steps on
# chainreg in their place, so that .carry/ab stays under the carry limit beside the Triton cache). The state pass's
# chain, on an H100 hidden under the copy waits, is read by its stage clocks; on an H200 (~2.1 us of bytes a step) it
# would be the bound. chainreg (the chain's A from registers) was level on an H100 in session 66 and checked then
# (full 40/40, backward-quick 22/22, GPU tests 208/208). On it, never run:
#   chainsplit (branch chainsplit: S's update in two d-halves, each its own wgmma group, so the first half's plane
#   stores run under the second's products);
#   chainkv (branch chainkv, on chainsplit: V_new's planes [v][t], one 32-bit store a pair where chainreg stored
#   element by element; the output's A_qk V_new takes them K-major).
# All three archives are --stage-clocks builds (stateclk d617872 = main's kernels, chainsplitclk 07126ff, chainkvclk
# 0314224). This call:
# 1  chainkvclk's checks (its code holds chainsplit's): kda-verify full and the GPU tests but backward / stress /
#    decode, in parallel;
# 2  the state-pass clocks of stateclk, chainsplitclk and chainkvclk at h64- and h96-fixed;
# 3  gpu_ab stateclk,chainsplitclk,chainkvclk at h64- and h96-fixed, 2 rounds;
# 4  on an H200: the six workloads beside FLA through main63's op (the last H200 figures are session 50's); on an
#    H100: ncu's full set with source on main63's prepare_kernel (phase 1, not profiled whole since session 60).
# Run as OUT=$OUT bash .carry/lease/s67_l1b.sh with .carry/slim.sh on and timeout_s 600, carry [".carry/lease",
# ".carry/ab", ".whl", ".carry/triton"] (.carry/ab: main63, stateclk, chainsplitclk, chainkvclk); returns
# s67_l1b.log, final.tgz, clocks.tgz, ab/results.tar, and results.tar (H100) or prefill.tgz and the Triton cache's
# two parts (H200): 7 files at most.
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s67_l1b
lease_unpack stateclk chainsplitclk chainkvclk
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lim=${LIMIT:-540}
h200=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -c H200)
pids=()
lease_run full-kv chainkvclk 4 200 ./kda-verify --impl cuda-generic --suite full & pids+=($!)
lease_run gtests-kv chainkvclk 4 200 ./kda_gpu_tests --gtest_filter='-*Backward*:*Stress*:*Decode*' & pids+=($!)
wait "${pids[@]}"
echo "checks done at $SECONDS s"
grep -hE " FAIL |kda-verify:" "$W/full-kv.log" | cut -c1-200 | head -8
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/gtests-kv.log" | head -5
lease_checks_done final
lease_clocks stateclk h64-fixed h96-fixed
lease_passed full-kv && lease_clocks chainsplitclk h64-fixed h96-fixed
lease_passed full-kv && lease_clocks chainkvclk h64-fixed h96-fixed
echo "clocks done at $SECONDS s"
builds=stateclk
lease_passed full-kv && builds=$builds,chainsplitclk,chainkvclk
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
