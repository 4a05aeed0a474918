#!/usr/bin/env bash
# Queued in session 56: issues #6 and #9 beside FLA with BUILD's libkda_torch.so. Sessions 55 and 56 each ran out of
# their limit with FLA compiling and autotuning (four and three of the seven prefill workloads), and session 56's
# whole Triton cache was over the 16 MiB a call hands back; scripts/triton_cache.sh now keeps its autotuning picks
# (TRITON_CACHE_AUTOTUNING=1) and hands back the slimmed cache in 15 MiB parts ($OUT/triton/part-*: copy them to
# .carry/triton/ for the next call). On a warm machine a second call finds the cache in /tmp as the first left it.
#   1  bench_torch.py --part prefill --impl kda --impl fla --iters 100 (the seven prefill workloads), cache saved
#   2  lease_torch_train BUILD h64-fixed (kda, kda-saved and FLA's training step) in what is left of 560 s
# Run as: OUT=$OUT bash .carry/lease/s57_l2.sh BUILD
# carry [".carry/lease", ".whl", ".carry/ab"] (.carry/ab holding BUILD's archive and COMMIT), and ".carry/triton"
# once a call has handed one back
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
b=$1
lease_begin s57_l2
lease_unpack "$b"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
triton_cache_restore
lease_torch_prefill "$b" 380
triton_cache_save
left=$((560 - SECONDS))
if [ $left -gt 120 ]; then lease_torch_train "$b" h64-fixed $left; triton_cache_save; else echo "no time for training"; fi
