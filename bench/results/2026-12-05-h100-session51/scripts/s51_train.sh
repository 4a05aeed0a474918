#!/usr/bin/env bash
# Prepared in session 49, queued again in session 50 (not run: the device budget went to refused tries): issue #9 criterion 4's training step beside FLA through the PyTorch op, one process a
# workload (FLA, kda recomputing, kda-saved: step time, peak extra memory, gradient errors), on mainpy (main as the next session finds it;
# scripts/gpu_build.sh --python --ab mainpy). Session 49 measured train-h64-fixed and
# train-h96-fixed on an H100 (kda-saved / FLA 0.653 and 0.635); FLA's compile and autotuning took 326 s to over 390 s
# a workload on a fresh cache, 65 s on a warm one, so Triton's cache goes back as $OUT/triton.tar.gz after each
# workload: carry it as .carry/triton.tar.gz in the next call. Cold: one workload a call; warm: all four fit.
# Run as: OUT=$OUT bash .carry/lease/s51_train.sh h64-mixed [h96-mixed h64-uniform h96-uniform]
# carry [".carry/lease", ".carry/ab/mainpy.tar.xz", ".whl", ".carry/ab/mainpy.COMMIT", ".carry/triton.tar.gz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s51_train
lease_unpack aqk2
lease_triton_cache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for w in "$@"; do
  lease_torch_train aqk2 "$w" 540
  lease_triton_save
done
