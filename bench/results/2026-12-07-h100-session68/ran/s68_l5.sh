#!/usr/bin/env bash
# Session 68, call 5.
# 1  call 4's ncu report of main68's state pass (ahead, h64-fixed, full set with source counters) exported where ncu
#    exists: the per-SASS-instruction source page (for scripts/ncu_stages.py here) and the details page;
# 2  rvstsm (branch, 5f91734 on main = stsm): the reverse pass's dS and -dU planes by stmatrix.x4 too. Checks: full and
#    backward-quick at one seed beside main68 (ahead; stsm's forward is bit-identical to it: call 4), the backward /
#    stress GPU tests;
# 3  ncu of the state and reverse passes' launches in a train-h64-fixed step, main68 and rvstsm.
# Run as OUT=$OUT bash .carry/lease/s68_l5.sh with .carry/slim.sh on (LIMIT below the budget left), carry
# [".carry/lease", ".carry/ab", ".carry/ncu"] (.carry/ab: main68, rvstsm); returns s68_l5.log, final.tgz,
# ncu-state-src-main68.csv.gz, ncu-state-main68.txt.
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s68_l5
r=.carry/ncu/ncu-state-main68.ncu-rep
ncu --import "$r" --page source --csv --print-source sass 2> "$W/ncu-export.log" | gzip > "$OUT/ncu-state-src-main68.csv.gz"
ncu --import "$r" --page details > "$OUT/ncu-state-main68.txt" 2>> "$W/ncu-export.log"
grep -E "Duration|DRAM Throughput|Executed Ipc A|Eligible Warps|Registers Per" "$OUT/ncu-state-main68.txt" | head -8
echo "export done at $SECONDS s"
lease_unpack main68 rvstsm
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lease_run btests-rv rvstsm 4 200 ./kda_gpu_tests --gtest_filter='*Backward*:*Stress*:WgmmaStateLayout.*' & pt=$!
lease_same_figures backward-quick main68 rvstsm
lease_same_figures full main68 rvstsm
wait $pt
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/btests-rv.log" | head -5
echo "checks done at $SECONDS s"
lease_checks_done final
for b in main68 rvstsm; do lease_ncu_launches "$b" train-h64-fixed 'state_wgmma|reverse_wgmma'; done
(cd "$W" && tar -czf "$OUT/final.tgz" .)
echo "done at $SECONDS s"
date -u
