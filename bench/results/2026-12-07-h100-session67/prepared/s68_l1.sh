#!/usr/bin/env bash
# Prepared in session 67 as the next first call. Session 67's clocks (bench/LEDGER.md "Session 67") put the state
# pass's chain products at 1003 / 1139 cycles a phase with the output warpgroup's products issued beside them on the
# tensor cores, ~770 alone, and showed that overlap inside the chain (chainsplit) cannot take that back. Candidates:
#   outwait (branch, a7c24ef on main; never run): the output warpgroup issues its products once the chain's of the
#   same phase are done (a named barrier a phase); bit-identical by construction; 210 registers, no spill;
#   kvwait (branch, a2feead on chainkv; never run): the same barrier on the transposed chain of chainkv (session 67:
#   full 40/40, GPU tests 210/210, level on an H100, its chain path 136 cycles shorter), whose split S update can then
#   have the tensor cores to itself.
# Archives (--stage-clocks builds on main's kernels): stateclk d617872, outwaitclk a7c24ef, kvwaitclk a2feead;
# main63 (d12886f, --python) for the op beside FLA. This call:
# 1  the checks, in parallel: outwaitclk's kda-verify full and backward-quick (the saving forward's instance changed
#    too) and GPU tests but backward / stress / decode; kvwaitclk's kda-verify full;
# 2  the state-pass clocks of stateclk, outwaitclk and kvwaitclk at h64- and h96-fixed;
# 3  gpu_ab of the three at h64- and h96-fixed, 2 rounds;
# 4  on an H200 (where the chain, not the bytes, should bind): the six workloads beside FLA through main63's op (the
#    last H200 figures are session 50's).
# Run as OUT=$OUT bash .carry/lease/s68_l1.sh with .carry/slim.sh on and timeout_s 600, carry [".carry/lease",
# ".carry/ab", ".whl", ".carry/triton"] (~55 MB; set LIMIT below 540 when the budget is short); returns s68_l1.log,
# final.tgz, clocks.tgz, ab/results.tar, and on an H200 prefill.tgz and the Triton cache's two parts.
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s68_l1
lease_unpack stateclk outwaitclk kvwaitclk
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lim=${LIMIT:-540}
h200=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -c H200)
pids=()
lease_run full-ow outwaitclk 3 200 ./kda-verify --impl cuda-generic --suite full & pids+=($!)
lease_run bq-ow outwaitclk 3 200 ./kda-verify --impl cuda-generic --suite backward-quick & pids+=($!)
lease_run gtests-ow outwaitclk 3 200 ./kda_gpu_tests --gtest_filter='-*Backward*:*Stress*:*Decode*' & pids+=($!)
lease_run full-kw kvwaitclk 3 200 ./kda-verify --impl cuda-generic --suite full & pids+=($!)
wait "${pids[@]}"
echo "checks done at $SECONDS s"
grep -hE " FAIL |kda-verify:" "$W/full-ow.log" "$W/bq-ow.log" "$W/full-kw.log" | cut -c1-200 | head -8
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/gtests-ow.log" | head -5
lease_checks_done final
ok=0
lease_passed full-ow && lease_passed bq-ow && ok=1
lease_clocks stateclk h64-fixed h96-fixed
[ $ok = 1 ] && lease_clocks outwaitclk h64-fixed h96-fixed
lease_passed full-kw && lease_clocks kvwaitclk h64-fixed h96-fixed
echo "clocks done at $SECONDS s"
builds=stateclk
[ $ok = 1 ] && builds=$builds,outwaitclk
lease_passed full-kw && builds=$builds,kvwaitclk
left=$((lim - SECONDS))
[ "$left" -gt 150 ] && left=150
[ "$left" -gt 40 ] && lease_ab "$builds" "$left" h64-fixed h96-fixed
if [ "$h200" != 0 ]; then
  left=$((lim - SECONDS))
  [ "$left" -gt 80 ] && lease_torch_prefill main63 "$left" h64-fixed h96-fixed h64-mixed h96-mixed h64-uniform h96-uniform
fi
echo "done at $SECONDS s"
date -u
