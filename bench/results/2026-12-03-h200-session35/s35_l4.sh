#!/usr/bin/env bash
# Session 35, call 4: the products kernel's output stores. prodcs: dM, QS, KD, BV, BK, dA stored as 8-byte pairs
# (were 4-byte scalars: 32 STG a thread a tile), dM, QS, KD, dA cache-streaming (st.global.cs,
# evict first in L2), the test of whether the outputs push this kernel's own operand re-reads out of L2 (ncu call 2:
# L2 88% busy, DRAM ~630 KB a task against ~450 KB of unique bytes). Against main34 (a5b8502). Every variant computes
# the same values in the same order: backward-quick at one seed must give main34's figures row for row. prodcs2:
# prodcs with every operand's last read copied under an evict-first L2 policy (cp.async .L2::cache_hint; S0's, dS_end's,
# V_new's, -dU's, T's last GEMM, U0, W and the read-back BV / BK). Then the backward / stress GPU tests of prodcs2, the
# A/B at train-h64-fixed and the products kernel of prodcs and prodcs2 under ncu.
# Run as: OUT=$OUT bash .carry/lease/s35_l4.sh
#   carry [".carry/lease", ".carry/ab/main34.tar.xz", ".carry/ab/prodcs.tar.xz", ".carry/ab/prodcs2.tar.xz"]
# (prodv2, the pairs without the streaming policy, was built but left out: four archives exceed the 64 MiB carried)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l4
lease_unpack main34 prodcs prodcs2
lease_run tests prodcs2 2 200 ./kda_gpu_tests --gtest_filter='*Backward*:*Stress*' & pt=$!
lease_same_figures backward-quick main34 prodcs prodcs2
wait $pt
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/tests.log" | head -20
date -u
mkdir -p "$OUT/ab"
OUT=$OUT/ab timeout 360 bash scripts/gpu_ab.sh --builds main34,prodcs,prodcs2 --impl cuda-generic --rounds 2 \
  --workload train-h64-fixed
echo "gpu_ab rc=$?"; date -u
lease_ncu prodcs train-h64-fixed 'products_kernel'
lease_ncu prodcs2 train-h64-fixed 'products_kernel'
cp "$W"/ncu-*.txt "$OUT/" 2>/dev/null
lease_checks_done
