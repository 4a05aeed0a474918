#!/usr/bin/env bash
# Session 70, call 1: the gradient pipe rebuilt (the session-69 branches were lost with their checkout), beside main70
# (c35d80f, main's kernels):
#   pipe0  (branch pipe0, 79a5189): the products and grad_tc's stage in one launch of 2-CTA clusters, a ticket a cluster
#          (chunk_grad_pipe.cu), the tiles still streamed out (evict-first stores) and nothing discarded: the launch
#          structure alone (session 69's persistent pipe was level with the two kernels);
#   l2fuse (branch l2fuse, 83e0d74): the same with the tiles stored with L2's default policy and dM / QS / BK discarded from L2
#          after a tame task's stage: the stage reads the tiles from L2, and ~80 KB a task is never written back.
# 1 checks: backward-quick at one seed on the three (the same figures), l2fuse's backward / stress GPU tests;
# 2 ncu: every gradient-pass launch of one train-h64-fixed step with its duration and DRAM bytes, the three builds;
# 3 gpu_ab main70,l2fuse,pipe0 at train-h64-fixed (~60 s a build a round; two rounds where they fit);
# 4 backward-full on l2fuse with the time left.
# Run as OUT=$OUT bash .carry/lease/s70_l1.sh, timeout_s 600, carry [".carry/lease", ".carry/ab"].
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s70_l1
lease_unpack main70 pipe0 l2fuse
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lim=${LIMIT:-540}
lease_run btests-l2 l2fuse 3 150 ./kda_gpu_tests --gtest_filter='*Backward*:*Stress*' & p1=$!
lease_same_figures backward-quick main70 pipe0 l2fuse
wait $p1
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/btests-l2.log" | head -5
echo "checks done at $SECONDS s"
lease_checks_done checks
for b in main70 pipe0 l2fuse; do
  (cd "/tmp/ab/$b" && LD_LIBRARY_PATH=. timeout 90 ncu --clock-control none -k "regex:products|grad_tc|grad_pipe|grad_rows" \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct \
    ./kda-bench --workload train-h64-fixed --impl cuda-generic --no-verify --iters 1 --warmup 0 > "$W/ncu-$b.txt" 2>&1)
  echo "== ncu $b"
  grep -E "^  [a-z_]+.*\(|gpu__time_duration|dram__bytes|lts__t_sector_hit" "$W/ncu-$b.txt" | sed 's/  */ /g' | cut -c1-110
done
echo "ncu done at $SECONDS s"
(cd "$W" && tar -czf "$OUT/ncu.tgz" ncu-*.txt)
left=$((lim - SECONDS - 150))
[ "$left" -gt 370 ] && left=370
[ "$left" -gt 60 ] && lease_ab main70,l2fuse,pipe0 "$left" train-h64-fixed
left=$((lim - SECONDS))
if [ "$left" -gt 140 ]; then
  lease_bwd_full l2fuse
  for n in bwdfull-a bwdfull-b bwdfull-c bwdfull-d; do lease_passed $n && echo "l2fuse: $n passed" || echo "l2fuse: $n FAILED"; done
  grep -hE "^bwd_" "$W"/bwdfull-*.log | cut -c1-160 | head -40
fi
(cd "$W" && tar -czf "$OUT/final.tgz" .)
echo "done at $SECONDS s"
date -u
