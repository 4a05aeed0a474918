#!/usr/bin/env bash
# Prepared in session 74 as the next session's first call for issue #9, after Design A closed (README here): rank the
# forward-saving step's launches on main's kernels and see what bounds the largest one that is bound by neither
# bytes nor issue. Session 68's list (main63): the saving prepare 1.13 ms at 57% of DRAM peak and 48% SM (3xTF32,
# keeping A' and T; the plain forward's is 0.91 ms), the state pass with saves 0.75 ms at 85% DRAM, the reverse pass
# 0.67 at 85%, products + grad_tc (now the pipe) 2.68 at 68%, grad_rows 0.45 at 84%.
#   1 every launch of one train-h64-fixed kda-bench step on main72 (7b65214, main's kernels), SpeedOfLight;
#   2 the saving prepare (prepare_kernel<128, 128, 1, ...>) with the memory, scheduler, warp-state and occupancy
#     sections: what holds it at 57% / 48%.
# Run as OUT=$OUT bash .carry/lease/s75_l1.sh, timeout_s 300, carry [".carry/lease", ".carry/ab"] (main72 alone);
# move bench/results out of the tree for the call and back after it.
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s75_l1
lease_unpack main72
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lease_ncu_launches main72 train-h64-fixed '.*'
cp "$W/ncu-launches-main72-train-h64-fixed.txt" "$OUT/ncu-step.txt"
(cd /tmp/ab/main72 && LD_LIBRARY_PATH=. timeout 120 ncu --clock-control none --kernel-name-base demangled \
  -k 'regex:prepare_kernel<128, 128, 1' -c 1 --section SpeedOfLight --section MemoryWorkloadAnalysis \
  --section SchedulerStats --section WarpStateStats --section Occupancy --section LaunchStats ./kda-bench \
  --workload train-h64-fixed --impl cuda-generic --no-verify --iters 1 --warmup 0 > "$OUT/ncu-prepare1.txt" 2>&1)
echo "ncu prepare rc=$?"
grep -E "Duration|DRAM Throughput|Eligible Warps|No Eligible|Achieved Occupancy|Registers Per|Stall" \
  "$OUT/ncu-prepare1.txt" | head -20
echo "done at $SECONDS s"
date -u
