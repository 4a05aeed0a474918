#!/usr/bin/env bash
# Session 37, call 5 (~220 s, the budget's last ~270 s): norms (branch s37-norms: main + the staging's q / k norms
# in one butterfly: warp_inv_norms, grad_tc's 4 rows' 8 norms and grad_rows' two; the same additions in the same
# order) against rue
# (= main c17467f's code). (1) backward-quick at one seed with bf16 gradients on both (the same figures expected: then
# call 3's backward-full on rue holds for norms) beside norms' backward and stress GPU tests (ptxas: norms' grad_rows
# spills 12 bytes, rue's 4); (2) the A/B at train-h64-fixed under 150 s (a round and a half: a start refused before
# this call took 90 s of the budget).
# Run as: OUT=$OUT bash .carry/lease/s37_l5.sh
#   carry [".carry/lease", ".carry/ab/rue.tar.xz", ".carry/ab/norms.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l5
lease_unpack rue norms
lease_run tests norms 2 150 ./kda_gpu_tests --gtest_filter='*Backward*:*Stress*' & p1=$!
lease_same_figures "backward-quick --input-dtype-grads" rue norms
wait $p1
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/tests.log" | head -20
(cd "$W" && tar -czf "$OUT/checks.tgz" .)
lease_ab rue,norms 150 train-h64-fixed
