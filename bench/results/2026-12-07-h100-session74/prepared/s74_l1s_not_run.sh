#!/usr/bin/env bash
# Session 74, the short form of s74_l1.sh for a device budget under ~750 s (ten failed starts took the rest): Design A
# steps 2-3 on the two workloads they change, no ncu. Builds as in s74_l1.sh, less tc512 (tc512p supersedes it):
#   main72 (7b65214), tc512p (84ec906), fuse (7e0138a), fusepf (ba04880).
# Predicted: the same bits on all four; fuse / fusepf faster than main72 at train-h64-fixed (the fused launch 0.2-0.5
# ms under the pipe's 2.69 ms); tc512p within +-3% of main72 at train-h96-fixed.
# Run as OUT=$OUT bash .carry/lease/s74_l1s.sh, timeout_s 600, carry [".carry/lease", ".carry/ab"]; move bench/results
# out of the tree for the call and back after it.
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s74_l1s
lease_unpack main72 tc512p fuse fusepf
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lim=${LIMIT:-480}
pids=()
for b in tc512p fuse fusepf; do
  lease_run "btests-$b" "$b" 2 200 ./kda_gpu_tests --gtest_filter='*Backward*:*Stress*' & pids+=($!)
done
lease_same_figures backward-quick main72 tc512p fuse fusepf
wait "${pids[@]}"
for b in tc512p fuse fusepf; do
  echo "$b: $(grep -hE "^\[  (FAILED|PASSED) " "$W/btests-$b.log" | head -3 | tr '\n' ' ')"
done
lease_checks_done checks
echo "checks done at $SECONDS s"
left=$((lim - SECONDS - 130))
[ "$left" -gt 220 ] && left=220
[ "$left" -gt 60 ] && lease_ab main72,fuse,fusepf "$left" --rounds 1 --dir ab-h64 train-h64-fixed
left=$((lim - SECONDS))
[ "$left" -gt 60 ] && lease_ab main72,tc512p "$left" --rounds 1 --dir ab-h96 train-h96-fixed
(cd "$W" && tar -czf "$OUT/final.tgz" .)
echo "done at $SECONDS s"
date -u
