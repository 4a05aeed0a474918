#!/usr/bin/env bash
# Session 64, after call 1 measured halves slower (the state pass 487 -> 801 us at h64-fixed: its chain is not ~1 us a
# step under ~3.8 us of bytes, as docs/hopper.md assumed). Where each phase's time goes, by Nsight Compute's stall and
# pipe sections, one launch each of main63's and c32py's state pass and phase 1 at h64-fixed:
#   SpeedOfLight, ComputeWorkloadAnalysis (pipe utilization: tensor), WarpStateStats (stall reasons), SchedulerStats,
#   MemoryWorkloadAnalysis, InstructionStats
# then, in what is left of LIMIT (default 420 s), issue #6's h64-fixed and h96-fixed beside FLA on this card
# (bench_torch, 100 graph replays; the figures of record are the H200's).
# Run as OUT=$OUT bash .carry/lease/s64_l3.sh with .carry/slim.sh on, carry [".carry/lease", ".whl", ".carry/triton",
# ".carry/ab/main63.tar.xz", ".carry/ab/main63.COMMIT", ".carry/ab/c32py.tar.xz", ".carry/ab/c32py.COMMIT"].
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s64_l3
lease_unpack main63 c32py
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ncu_full() {  # BUILD KERNEL_REGEX TAG
  local f="$W/ncu-$1-$3.txt"
  (cd "/tmp/ab/$1" && LD_LIBRARY_PATH=. timeout 90 ncu --clock-control none -k "regex:$2" -c 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
    --section MemoryWorkloadAnalysis --section InstructionStats ./kda-bench --workload h64-fixed --impl cuda-generic \
    --no-verify --iters 1 --warmup 0 > "$f" 2>&1)
  echo "== ncu $1 $3 rc=$? at $SECONDS s"
  grep -E "^ +(Duration|DRAM Throughput|Compute \(SM\) Throughput|Issue Slots Busy|Eligible Warps|No Eligible|Warp Cycles Per Issued)" "$f" | cut -c1-100
}
ncu_full main63 state_wgmma state
ncu_full c32py state_wgmma state
ncu_full main63 prepare_kernel prepare
ncu_full c32py prepare_kernel prepare
# The tensor path's work, to set against its peak (a separate run: a metric this ncu lacks fails only this one).
(cd /tmp/ab/main63 && LD_LIBRARY_PATH=. timeout 60 ncu --clock-control none -k "regex:state_wgmma|prepare_kernel" \
  --metrics sm__ops_path_tensor_src_bf16_dst_fp32.sum,sm__ops_path_tensor_src_tf32_dst_fp32.sum,gpu__time_duration.sum,sm__cycles_elapsed.avg \
  ./kda-bench --workload h64-fixed --impl cuda-generic --no-verify --iters 1 --warmup 0 > "$W/ncu-main63-tensor-ops.txt" 2>&1)
echo "== ncu tensor ops rc=$? at $SECONDS s"
grep -E "state_wgmma|prepare_kernel|sm__ops|duration|cycles_elapsed" "$W/ncu-main63-tensor-ops.txt" | cut -c1-110 | head -16
(cd "$W" && tar -czf "$OUT/ncu.tgz" ncu-*.txt)  # one file back: the tool returns at most 8
lim=${LIMIT:-420}
left=$((lim - SECONDS))
[ "$left" -gt 150 ] && lease_torch_prefill main63 "$left" h64-fixed h96-fixed
echo "done at $SECONDS s"
date -u
