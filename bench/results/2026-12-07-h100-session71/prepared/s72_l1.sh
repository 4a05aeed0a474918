#!/usr/bin/env bash
# Prepared in session 71 as the next session's first call. Builds (scripts/gpu_build.sh --ab NAME in a checkout of
# each; a new checkout has none of them: rebuild first, the branch or `patches/NAME.diff` applied to main):
#   main72 (7b65214 or later main): dsmx landed (grad_tc's halves exchange partial dots by a bulk copy);
#   lead2  (main + patches/lead2.diff: GradPipePlan's lead half the resident clusters, so the pipe's first wave mixes
#          stages in beside the products instead of running products alone; a stage follows its products pair by
#          ~3 lead tickets, ~45 us at train-h64-fixed on an H100, still under a task's products time ~53 us).
# Predicted: level to -1% of the pipe (2.7 ms) where it runs (every train-* workload but train-h96-fixed, whose
# partial reverse wave keeps two launches); a stage waiting on its flag would show as slower.
# 1 checks: backward-quick at one seed on main72 and lead2 (the same figures: the schedule changes, not the bits);
# 2 gpu_ab main72,lead2, two rounds at train-h64-fixed, one at train-h96-mixed.
# Run as OUT=$OUT bash .carry/lease/s72_l1.sh (a copy of this file), timeout_s 600, carry [".carry/lease",
# ".carry/ab"]; move bench/results out of the tree for the call and back after it.
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s72_l1
lease_unpack main72 lead2
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lim=${LIMIT:-560}
lease_same_figures backward-quick main72 lead2
echo "checks done at $SECONDS s"
left=$((lim - SECONDS - 150))
[ "$left" -gt 260 ] && left=260
[ "$left" -gt 60 ] && lease_ab main72,lead2 "$left" --dir ab-h64 train-h64-fixed
left=$((lim - SECONDS))
[ "$left" -gt 80 ] && lease_ab main72,lead2 "$left" --rounds 1 --dir ab-h96m train-h96-mixed
(cd "$W" && tar -czf "$OUT/final.tgz" .)
echo "done at $SECONDS s"
date -u
