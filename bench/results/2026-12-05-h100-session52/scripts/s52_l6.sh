#!/usr/bin/env bash
# Session 52, call 6: wgplan's backward checks. Its unsplit plan now gives a forward of <= 33 chains 64-column wgmma
# tiles, so a backward's recompute on few heads (the GPU tests' and backward-quick's cases) runs the wgmma kTma
# instance where it ran 32-column generic tiles, while its reverse pass keeps 32-column tiles (one-family pricing).
# lease_bwd_quick: the backward / stress GPU tests beside backward-quick.
# Run as: OUT=$OUT bash .carry/lease/s52_l6.sh   carry [".carry/lease", ".carry/ab/wgplan.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s52_l6
lease_unpack wgplan
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lease_bwd_quick wgplan
