#!/usr/bin/env bash
# Session 21's fifth device call (~450 s): m21 (checked in call 4: full 39/39 at two seeds, backward-quick 21/21 at
# two) beside FLA in one process (s20_l3_prepared.sh: six prefill workloads, the training step), then the forced-
# HOPPER and backward GPU tests call 4's unfiltered run did not reach (it timed out in the decode cases).
# Run as: OUT=$OUT bash .carry/lease/s21_l5.sh   with carry [".carry/lease", ".carry/ab/m21.tar.xz",
# ".carry/ab/m21.COMMIT", ".whl", ".carry/triton.tgz"].
set -uo pipefail
cd "$(dirname "$0")/../.."
mkdir -p "$OUT/peers"
BUILD=m21 OUT=$OUT/peers timeout 420 bash .carry/lease/s20_l3_prepared.sh
(cd "$OUT/peers" && tar -czf "$OUT/peers.tgz" l3.log peers_* && mv triton.tgz.part-* "$OUT/" && cd .. && rm -rf peers)
exec > >(tee "$OUT/l5.log") 2>&1
W=$(mktemp -d)
source scripts/lease_lib.sh
F='Wgmma*:Own/CudaHopper.*:Cases/CudaHopperBackward.*:CudaBehaviour.*:Backends/CudaBackwardDeterminism.*'
lease_run tests m21 4 100 ./kda_gpu_tests --gtest_filter="$F"
cp "$W/tests.log" "$OUT/tests.log"
ls "$OUT"; date -u
