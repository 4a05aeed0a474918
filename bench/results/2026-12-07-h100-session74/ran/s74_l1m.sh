#!/usr/bin/env bash
# Session 74, the smallest form of s74_l1.sh, for a device budget under ~460 s (thirteen failed starts took the rest):
# fuse (7e0138a) against main72 (7b65214) at train-h64-fixed alone: the GPU tests and backward-quick's figures on
# both, then one gpu_ab round. Predicted: the same bits; fuse's step under main72's by the fused launch's 0.2-0.5 ms.
# Run as LIMIT=S OUT=$OUT bash .carry/lease/s74_l1m.sh, carry [".carry/lease", ".carry/ab"] (the two archives alone).
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s74_l1m
lease_unpack main72 fuse
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lim=${LIMIT:-300}
lease_run btests-fuse fuse 2 150 ./kda_gpu_tests --gtest_filter='*Backward*:*Stress*' & p1=$!
lease_same_figures backward-quick main72 fuse
wait $p1
echo "fuse: $(grep -hE "^\[  (FAILED|PASSED) " "$W/btests-fuse.log" | head -3 | tr '\n' ' ')"
lease_checks_done checks
echo "checks done at $SECONDS s"
left=$((lim - SECONDS - 10))
[ "$left" -gt 60 ] && lease_ab main72,fuse "$left" --rounds 1 --dir ab-h64 train-h64-fixed
(cd "$W" && tar -czf "$OUT/final.tgz" .)
echo "done at $SECONDS s"
date -u
