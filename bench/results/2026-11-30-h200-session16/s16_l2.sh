#!/usr/bin/env bash
# Session 16, call 2 (~300 s): main (1829c28 = ea795c7 + combo15, measured in call 1) against pre (ea795c7):
#   1. gpu_ab on train-h96-fixed (statesplit's reverse-pass half; predicted backward -100 to -300 us), h96-mixed and
#      h64-mixed (packed: the state-pass plan is unchanged there, so only s4overlap's phase-1 gain should show).
#   2. ncu SpeedOfLight of one h64-fixed and one h96-fixed forward on main (prepare, state pass and its split launch):
#      where the remaining 2.0 / 3.2 ms go, to aim the next change.
#   3. FLA's decode through kda-verify's protocol (scripts/verify_impls/fla_fused_recurrent_kda.py, never run yet).
#   4. ncu on two decode questions left open in session 15: the bulk kernel's steady state at H32 B256 (87% of the
#      copy rate) and the one-kernel fused decode at H32 B1 (7.62 us against plain 3.99).
# Run as: OUT=$OUT bash .carry/lease/s16_l2.sh   with carry [".carry/lease", ".carry/ab", ".whl"].
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l2.log") 2>&1
date -u
OUT=$OUT timeout 200 bash scripts/gpu_ab.sh --builds main,pre --impl cuda-generic --rounds 1 \
  --workload train-h96-fixed --workload h96-mixed --workload h64-mixed
echo "gpu_ab rc=$?"
date -u
B=/tmp/ab/main; mkdir -p $B && tar -xJf .carry/ab/main.tar.xz -C $B
W=$(mktemp -d)
for wl in h64-fixed h96-fixed; do
  (cd $B && LD_LIBRARY_PATH=. timeout 120 ncu --clock-control none -k regex:'build_chunk_map|prepare_kernel|state_kernel' \
    -c 4 --section SpeedOfLight --section LaunchStats --section Occupancy ./kda-bench --workload $wl --impl cuda-generic \
    --no-verify --iters 1 --warmup 0 > "$W/ncu-fwd-$wl.txt" 2>&1; echo "ncu $wl rc=$?")
  grep -E "^  [a-z_].*\(|Duration|Grid Size|Compute \(SM\) Throughput|Memory Throughput" "$W/ncu-fwd-$wl.txt" | cut -c1-140
done
date -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export TRITON_CACHE_DIR=/tmp/kda-triton-cache; mkdir -p $TRITON_CACHE_DIR
(cd $B && PYTHONPATH=/tmp/site:$OLDPWD/scripts/verify_impls LD_LIBRARY_PATH=. timeout 150 ./kda-verify \
  --suite decode-full --impl "cmd:python3 $OLDPWD/scripts/verify_impls/fla_fused_recurrent_kda.py" \
  --json "$W/verify-fla-decode.json" > "$W/verify-fla-decode.log" 2>&1; echo "fla decode verify rc=$?")
tail -n 25 "$W/verify-fla-decode.log"
date -u
sec=(--section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats
     --section MemoryWorkloadAnalysis --section SchedulerStats)
(cd $B && LD_LIBRARY_PATH=. timeout 90 ncu --clock-control none -k regex:decode_bulk -c 1 "${sec[@]}" \
  ./kda-bench --workload decode-h32-b256 --impl cuda-generic --no-verify --iters 1 --warmup 0 \
  > "$W/ncu-decode-b256.txt" 2>&1; echo "ncu b256 rc=$?")
(cd $B && LD_LIBRARY_PATH=. timeout 90 ncu --clock-control none -k regex:decode_head -c 1 "${sec[@]}" \
  --section SourceCounters ./kda-bench --workload decode-h32-b1-fused --impl cuda-generic --no-verify --iters 1 \
  --warmup 0 > "$W/ncu-decode-b1-fused.txt" 2>&1; echo "ncu b1 fused rc=$?")
grep -h -E "Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Stall|Issue Slot" \
  "$W"/ncu-decode-*.txt | head -40
(cd "$W" && tar -czf "$OUT/checks.tgz" .)
tar -czf "$OUT/triton.tgz" -C /tmp kda-triton-cache 2>/dev/null
date -u
