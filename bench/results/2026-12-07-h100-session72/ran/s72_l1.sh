#!/usr/bin/env bash
# Prepared in session 71 as the next session's first call. Builds (scripts/gpu_build.sh --ab NAME in a checkout of
# each; a new checkout has none of them: rebuild first, the branch or `patches/NAME.diff` applied to main):
#   main72    (c0a88c5 or later main): dsmx landed (grad_tc's halves exchange partial dots by a bulk copy);
#   lead2     (branch 2c955ce, patches/lead2.diff: GradPipePlan's lead half the resident clusters, so the pipe's
#             first wave mixes stages in beside the products; a stage still follows its products by ~45 us at
#             train-h64-fixed, under a task's products time, ~53 us);
#   pipetable (branch 970d5ae, patches/pipetable.diff: pipewave's plan over a head range, the pipe on train-h96-fixed's
#             partial-reverse-wave path too, but worked out before the launch into a ticket table by a small kernel,
#             so the pipe kernel's code is a load: ptxas 12 bytes of spill, against pipewave's 40 that cost ~120 us).
# Predicted: lead2 level to -1% of the pipe (2.7 ms) where it runs; pipetable level at h64 (+-0.3%: its spill 12
# against main's 8, the table kernel ~5 us), -1..-2% of the backward at train-h96-fixed if pipewave's +2.3% there was
# its code generation.
# 1 checks: backward-quick at one seed on the three (the same figures: schedules change, not bits); pipetable's
#   backward / stress GPU tests (HopperPartialReverseWaveMatchesReference runs its new path);
# 2 gpu_ab main72,lead2,pipetable, one round at train-h64-fixed; main72,pipetable one round at train-h96-fixed.
# Run as OUT=$OUT bash .carry/lease/s72_l1.sh (a copy of this file), timeout_s 600, carry [".carry/lease",
# ".carry/ab"]; move bench/results out of the tree for the call and back after it.
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s72_l1
lease_unpack main72 lead2 pipetable
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lim=${LIMIT:-560}
lease_run btests-pipetable pipetable 2 200 ./kda_gpu_tests --gtest_filter='*Backward*:*Stress*' & p1=$!
lease_same_figures backward-quick main72 lead2 pipetable
wait $p1
grep -hE "^\[  (FAILED|PASSED) |tests? ran|PartialReverseWave" "$W/btests-pipetable.log" | head -8
lease_checks_done checks
echo "checks done at $SECONDS s"
left=$((lim - SECONDS - 160))
[ "$left" -gt 230 ] && left=230
[ "$left" -gt 60 ] && lease_ab main72,lead2,pipetable "$left" --rounds 1 --dir ab-h64 train-h64-fixed
left=$((lim - SECONDS))
[ "$left" -gt 80 ] && lease_ab main72,pipetable "$left" --rounds 1 --dir ab-h96 train-h96-fixed
(cd "$W" && tar -czf "$OUT/final.tgz" .)
echo "done at $SECONDS s"
date -u
