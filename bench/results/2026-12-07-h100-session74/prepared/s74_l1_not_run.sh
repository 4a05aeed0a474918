#!/usr/bin/env bash
# Prepared in session 73 (no device machine was lent then) as the next session's first call: Design A's steps 1-3.
# Builds (scripts/gpu_build.sh --ab NAME in a checkout of each; a new checkout has none: rebuild from the branch or
# bench/results/2026-12-07-cpu-session73/patches/NAME.diff applied to main):
#   main72 (7b65214): main's kernels (the gradient pipe at train-h64-fixed, the cluster grad_tc at train-h96-fixed);
#   tc512  (branch tc512, a13982a): grad_tc's K = 128 halves as the two 256-thread groups of one 512-thread CTA
#          (grad_tc_task.cuh CtaPair) in the standalone grad_tc launch (train-h96-fixed's path);
#   tc512p (branch tc512p, 84ec906; on tc512s, f07efa5, one dM / dA copy for both groups): dM / dA packed into one
#          [64][64] array (CtaLayout: 119 KB a CTA, where tc512 takes 171);
#   fuse   (branch fuse, 7e0138a): tc512p plus the fused gradient launch in place of the pipe (chunk_grad_pipe.cu):
#          a tame task's products on a 512-thread CTA's first 256 threads, dM / dA / QS / KD / BK left in shared
#          memory (220 KB; P3 reads BK there), then the stage on all 16 warps reading them there (train-h64-fixed's
#          path);
#   fusepf (branch fusepf, ba04880): fuse with the other 256 threads asking L2 for the stage's q / k / g rows while the
#          products run.
# Predicted: the same bits on all five (the same sums in the same order; the tiles hold the same floats on chip);
# grad_tc at train-h96-fixed within +-3% of main72's for tc512 and tc512p; the fused launch at train-h64-fixed under
# the pipe's 2.69 ms (ncu) by 0.2-0.5 ms if the products at one 8-warp group an SM cost ~occ1's +12% and the ~240 KB a
# task they no longer write or read back come off; fusepf at or under fuse.
# Run as OUT=$OUT bash .carry/lease/s74_l1.sh, timeout_s 600, carry [".carry/lease", ".carry/ab"] (five archives,
# ~50 MB); move bench/results out of the tree for the call and back after it.
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s74_l1
lease_unpack main72 tc512 tc512p fuse fusepf
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lim=${LIMIT:-560}
pids=()
for b in tc512 tc512p fuse fusepf; do
  lease_run "btests-$b" "$b" 2 200 ./kda_gpu_tests --gtest_filter='*Backward*:*Stress*' & pids+=($!)
done
lease_same_figures backward-quick main72 tc512 tc512p fuse fusepf
wait "${pids[@]}"
for b in tc512 tc512p fuse fusepf; do
  echo "$b: $(grep -hE "^\[  (FAILED|PASSED) " "$W/btests-$b.log" | head -3 | tr '\n' ' ')"
done
lease_checks_done checks
echo "checks done at $SECONDS s"
# The fused launch against the pipe: one step's launches at train-h64-fixed, then the launch's DRAM bytes.
for b in main72 fuse fusepf; do
  lease_ncu_launches "$b" train-h64-fixed 'products|grad_tc|grad_pipe|grad_fused|grad_rows'
done
lease_ncu_bytes main72 train-h64-fixed grad_pipe 1
lease_ncu_bytes fuse train-h64-fixed grad_fused 1
echo "ncu h64 done at $SECONDS s"
left=$((lim - SECONDS))
[ "$left" -gt 100 ] && lease_ab main72,fuse,fusepf "$((left > 230 ? 220 : left - 10))" --rounds 1 --dir ab-h64 \
  train-h64-fixed
for b in main72 tc512 tc512p; do lease_ncu "$b" train-h96-fixed grad_tc; done
grep -HE "Issue Slots Busy|Issued Warp Per Scheduler|Active Warps Per Scheduler" "$W"/ncu-*-train-h96-fixed-grad_tc.txt |
  cut -c1-120
echo "ncu h96 done at $SECONDS s"
left=$((lim - SECONDS))
[ "$left" -gt 100 ] && lease_ab main72,tc512,tc512p "$left" --rounds 1 --dir ab-h96 train-h96-fixed
(cd "$W" && tar -czf "$OUT/final.tgz" .)
echo "done at $SECONDS s"
date -u
