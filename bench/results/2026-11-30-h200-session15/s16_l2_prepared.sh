#!/usr/bin/env bash
# Prepared in session 15 for session 16's second device call (after s16_l1_prepared.sh), ~400 s:
#   1. statesplit's reverse-pass half: gpu_ab main against split on train-h96-fixed (its backward; predicted -100 to
#      -300 us) and h96-mixed (packed: the plan is unchanged there, a control: equal within noise).
#   2. FLA's decode under the judge: kda-verify --suite decode-full on scripts/verify_impls/fla_fused_recurrent_kda.py
#      (written in session 15, never run: a harness error shows here first; the cases FLA has no form for fail with
#      the reason, the rest are judged). Needs .whl carried (FLA, einops).
#   3. Nsight Compute on two decode questions session 15 left open: the bulk kernel's steady state (87% of the copy
#      rate at H32 B256: DRAM throughput, stall reasons) and the one-kernel fused decode at H32 B1 (7.62 us against
#      the plain decode's 3.99: where its chain goes).
# Run as: OUT=$OUT bash .carry/lease/s16_l2_prepared.sh   with carry [".carry/lease", ".carry/ab", ".whl"].
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l2.log") 2>&1
date -u
OUT=$OUT timeout 240 bash scripts/gpu_ab.sh --builds main,split --impl cuda-generic --rounds 1 \
  --workload train-h96-fixed --workload h96-mixed
echo "gpu_ab rc=$?"
date -u
mkdir -p /tmp/ab/main && tar -xJf .carry/ab/main.tar.xz -C /tmp/ab/main
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
(cd /tmp/ab/main && PYTHONPATH=/tmp/site:$OLDPWD/scripts/verify_impls LD_LIBRARY_PATH=. timeout 150 ./kda-verify \
  --suite decode-full --impl "cmd:python3 $OLDPWD/scripts/verify_impls/fla_fused_recurrent_kda.py" \
  --json "$OUT/verify-fla-decode.json" > "$OUT/verify-fla-decode.log" 2>&1; echo "fla decode verify rc=$?")
tail -n 25 "$OUT/verify-fla-decode.log"
date -u
sec=(--section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats
     --section MemoryWorkloadAnalysis --section SchedulerStats)
(cd /tmp/ab/main && LD_LIBRARY_PATH=. timeout 90 ncu --clock-control none -k regex:decode_bulk -c 1 "${sec[@]}" \
  ./kda-bench --workload decode-h32-b256 --impl cuda-generic --no-verify --iters 1 --warmup 0 \
  > "$OUT/ncu-decode-b256.txt" 2>&1; echo "ncu b256 rc=$?")
(cd /tmp/ab/main && LD_LIBRARY_PATH=. timeout 90 ncu --clock-control none -k regex:decode_head -c 1 "${sec[@]}" \
  --section SourceCounters ./kda-bench --workload decode-h32-b1-fused --impl cuda-generic --no-verify --iters 1 \
  --warmup 0 > "$OUT/ncu-decode-b1-fused.txt" 2>&1; echo "ncu b1 fused rc=$?")
grep -h -E "Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Stall|Issue Slot" \
  "$OUT"/ncu-*.txt | head -40
date -u
