#!/usr/bin/env bash
# Queued in session 57: issue #9's training step beside FLA on the standard workloads beyond h64-fixed (criterion 4
# asks for all six), with BUILD's libkda_torch.so. FLA autotunes each new training shape afresh (~200-300 s on a cold
# cache), so a call reaches two or three; Triton's cache is handed back after each (triton/part-*: copy them to
# .carry/triton/ and carry it next time, and the next call starts where this one stopped).
# Run as: OUT=$OUT bash .carry/lease/s58_l2.sh BUILD [WORKLOAD...] (default: the five beyond h64-fixed)
# carry [".carry/lease", ".whl", ".carry/ab", ".carry/triton"] (.carry/ab holding BUILD's archive and COMMIT)
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
b=$1
shift
wls=("$@")
[ ${#wls[@]} -gt 0 ] || wls=(h96-fixed h64-mixed h96-mixed h64-uniform h96-uniform)
lease_begin s58_l2
lease_unpack "$b"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
triton_cache_restore
for wl in "${wls[@]}"; do
  left=$((560 - SECONDS))
  if [ $left -lt 90 ]; then echo "no time for train-$wl ($left s left)"; break; fi
  lease_torch_train "$b" "$wl" "$left"
  triton_cache_save
done
