#!/usr/bin/env bash
# Prepared in session 51 for the next device session: segwg (branch segwg: 065dfb4, the segmented state pass on the
# wgmma state kernel, and 554d05d, the decode norm kernel's gate loads before its reduction; or their rebase) against main52
# (main as the next session finds it, with the combine of 2cd20af), both built with
# `scripts/gpu_build.sh --python --ab NAME` (this machine may lose .carry between sessions); s52_l2.sh then times the
# norm change:
#   1  segwg's forward checks (lease_fwd_checks: kda-verify --suite full and the forward GPU tests, which include the
#      "_segments" cases under Own/CudaHopper: the wgmma kSeg instance is theirs now)
#   2  every launch of one h4-32k step under ncu on both builds (pass 1 / pass 2 on state_wgmma_kernel now)
#   3  gpu_ab main52,segwg at h4-32k and h64-fixed (unsplit: the instances' SASS moved by 8 instructions) and
#      train-h64-fixed (the recompute's kTma instance lost its dead output code)
# ~330 s + start. Run as: OUT=$OUT bash .carry/lease/s52_l1.sh
# carry [".carry/lease", ".carry/ab/main52.tar.xz", ".carry/ab/segwg.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s52_l1
lease_unpack main52 segwg
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
if lease_fwd_checks segwg; then
  lease_ncu_launches main52 h4-32k .
  lease_ncu_launches segwg h4-32k .
  lease_ab main52,segwg 200 h4-32k h64-fixed train-h64-fixed
else
  echo "segwg failed its forward checks: no timing"
  lease_ncu_launches segwg h4-32k .
fi
