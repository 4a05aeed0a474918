#!/usr/bin/env bash
# Session 62, call 3: issue #9's training step beside FLA in one process (lease_torch_train: FLA, kda, kda-saved, 20
# iterations) at train-h64-fixed with main63's libkda_torch.so, the first since session 58; Triton's cache from call 2
# carried in (.carry/triton) and handed back.
# Run as OUT=$OUT bash .carry/lease/s62_l3.sh with .carry/slim.sh on, carry [".carry/lease", ".whl", ".carry/triton",
# ".carry/ab/main63.tar.xz", ".carry/ab/main63.COMMIT"]; <= ~300 s.
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s62_l3
lease_unpack main63
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
triton_cache_restore
lease_torch_train main63 h64-fixed 330
triton_cache_save
echo "done at $SECONDS s"
date -u
