#!/usr/bin/env bash
# Session 70, call 2. Call 1 (s70_l1.sh): pipe0 (the gradient pipe, tiles streamed out) took train-h64-fixed's
# backward 5699-5709 -> 5607 us; l2fuse (tiles with L2's default policy, dead lines discarded) moved the same DRAM bytes
# as pipe0 and was slower (5649 us): its tiles had left L2 before their stage.
#   pipe0  (branch pipe0, 79a5189): the landing checks: backward / stress GPU tests, backward-full;
#   l2last (branch l2last, 091feb3): the tiles stored evict-last, after the stage the dead lines (dM, QS, BK of a tame
#          task) dropped and the rest demoted to evict-normal: bit-identical (backward-quick beside pipe0), ncu of the
#          gradient launches (time, DRAM bytes, L2 hit rate) and gpu_ab pipe0,l2last at train-h64-fixed.
# Run as OUT=$OUT LIMIT=... bash .carry/lease/s70_l2.sh, carry [".carry/lease", ".carry/ab"].
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s70_l2
lease_unpack pipe0 l2last
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lim=${LIMIT:-440}
lease_run btests-p0 pipe0 3 150 ./kda_gpu_tests --gtest_filter='*Backward*:*Stress*' & p1=$!
lease_same_figures backward-quick pipe0 l2last
wait $p1
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/btests-p0.log" | head -5
echo "checks done at $SECONDS s"
lease_checks_done checks
lease_bwd_full pipe0
for n in bwdfull-a bwdfull-b bwdfull-c bwdfull-d; do lease_passed $n && echo "pipe0: $n passed" || echo "pipe0: $n FAILED"; done
grep -hE "^bwd_" "$W"/bwdfull-*.log | cut -c1-160 | head -40
echo "backward-full done at $SECONDS s"
for b in pipe0 l2last; do
  (cd "/tmp/ab/$b" && LD_LIBRARY_PATH=. timeout 60 ncu --clock-control none -k "regex:grad_pipe|grad_rows" -c 2 \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct \
    ./kda-bench --workload train-h64-fixed --impl cuda-generic --no-verify --iters 1 --warmup 0 > "$W/ncu-$b.txt" 2>&1)
  echo "== ncu $b"
  grep -E "^  [a-z_]+.*\(|gpu__time_duration|dram__bytes|lts__t_sector_hit" "$W/ncu-$b.txt" | sed 's/  */ /g' | cut -c1-110
done
echo "ncu done at $SECONDS s"
(cd "$W" && tar -czf "$OUT/ncu.tgz" ncu-*.txt)
left=$((lim - SECONDS - 10))
[ "$left" -gt 250 ] && left=250
[ "$left" -gt 60 ] && lease_ab pipe0,l2last "$left" train-h64-fixed
(cd "$W" && tar -czf "$OUT/final.tgz" .)
echo "done at $SECONDS s"
date -u
