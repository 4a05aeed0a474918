#!/usr/bin/env bash
# Session 47's first checking call (~330 s + start): branch qkfin2 (qkfin's dq / dk finishing in grad_tc, rebased on
# main, now for every gradient dtype and layout: session 47's first call found the bf16-only path broke
# CudaBackwardBehaviour.ChannelStridedGradientsMatchContiguous, the strided view taking grad_rows' finishing).
#   1  qkfin2's backward / stress GPU tests beside backward-full (fp32 gradients: the generic instance's new finishing;
#      the bf16 instance's code is qkfin's, whose backward-full --input-dtype-grads passed at 04:26 UTC)
#   2  gpu_ab.sh main46,qkfin2 at train-h64-fixed, two rounds (main46: main's backward kernels)
# Run as: OUT=$OUT bash .carry/lease/s47_l1.sh
# carry [".carry/lease", ".carry/ab/main46.tar.xz", ".carry/ab/qkfin2.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s47_l1
lease_unpack main46 qkfin2
lease_bwd_checks qkfin2
lease_checks_done checks-qkfin2
lease_ab main46,qkfin2 200 train-h64-fixed
date -u
