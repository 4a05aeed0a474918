#!/usr/bin/env bash
# Prepared in session 70 as the next session's first call. Builds (scripts/gpu_build.sh --ab NAME in a checkout of
# each; a new checkout has none of them, rebuild first):
#   main70 (c35d80f): main before the gradient pipe;
#   main71 (main at session 70's end, e46589e or later): the gradient pipe (chunk_grad_pipe.cu);
#   dsmx   (main71 with prepared/dsmx.diff applied): grad_tc's K = 128 halves send their partial dots by one bulk copy
#          into the partner's shared memory on its mbarrier (no cluster barrier between them but one relaxed
#          arrive / wait pair; session 69's profile put the two barriers it replaces at 5.5% of grad_tc's stall
#          samples). Predicted: the stage -2..-5%, the pipe ~-1..-2%.
# 1 checks: backward-quick at one seed on main71 and dsmx (the same figures), dsmx's backward / stress GPU tests;
# 2 ncu: the gradient launches of one train-h64-fixed step, main71 and dsmx (time, DRAM bytes);
# 3 gpu_ab main71,dsmx at train-h64-fixed (two rounds);
# 4 gpu_ab main70,main71 at train-h96-fixed (one round): the products_kernel that still runs there (a partial reverse
#   wave keeps the two launches) has the same instructions as main70's in a different schedule (its body is now an
#   inlined function); not timed in session 70.
# Run as OUT=$OUT bash .carry/lease/s71_l1.sh (a copy of this file), timeout_s 600, carry [".carry/lease",
# ".carry/ab"]; move bench/results out of the tree for the call (the tracked tree is ~48 MB: with the archives over
# the 64 MiB a call carries) and back after it.
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s71_l1
lease_unpack main70 main71 dsmx
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lim=${LIMIT:-560}
lease_run btests-dsmx dsmx 3 150 ./kda_gpu_tests --gtest_filter='*Backward*:*Stress*' & p1=$!
lease_same_figures backward-quick main71 dsmx
wait $p1
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/btests-dsmx.log" | head -5
echo "checks done at $SECONDS s"
lease_checks_done checks
for b in main71 dsmx; do lease_ncu_bytes "$b" train-h64-fixed 'grad_pipe|grad_tc|grad_rows'; done
(cd "$W" && tar -czf "$OUT/ncu.tgz" ncu-*.txt)
echo "ncu done at $SECONDS s"
left=$((lim - SECONDS - 130))
[ "$left" -gt 250 ] && left=250
[ "$left" -gt 60 ] && lease_ab main71,dsmx "$left" train-h64-fixed
mv "$OUT/ab" "$OUT/ab-dsmx" 2>/dev/null
left=$((lim - SECONDS))
[ "$left" -gt 100 ] && lease_ab main70,main71 "$left" train-h96-fixed
(cd "$W" && tar -czf "$OUT/final.tgz" .)
echo "done at $SECONDS s"
date -u
