#!/usr/bin/env bash
# Session 61, call 3: issue #6's h64-fixed and h96-fixed forwards through the torch op on main63 (d12886f, main with
# s0cpk landed, built with --python) beside FLA in one process (bench_torch.py --part prefill, 100 iterations; FLA's Triton
# compile on a cold cache ~300 s a workload, so h96-fixed only if time is left), Triton's cache handed back as
# $OUT/triton/ for the next call. Run as OUT=$OUT bash .carry/lease/s61_l3.sh, carry [".carry/lease",
# ".carry/ab/main63.tar.xz", ".carry/ab/main63.COMMIT", ".whl"]; ~350-550 s.
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s61_l3
lease_unpack main63
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
triton_cache_restore
lease_wheels
commit=$(cut -c1-7 .carry/ab/main63.COMMIT)
for wl in h64-fixed h96-fixed; do
  left=$((560 - SECONDS))
  if [ $left -lt 120 ]; then echo "no time for $wl ($left s left)"; break; fi
  LD_LIBRARY_PATH=/tmp/ab/main63 KDA_TORCH_LIBRARY=/tmp/ab/main63/libkda_torch.so PYTHONPATH="/tmp/site:$PWD/python" \
    timeout "$left" python3 scripts/bench_torch.py --part prefill --workload "$wl" --impl kda --impl fla \
    --iters 100 --commit "$commit" --json "$OUT/prefill-$wl.json" > "$OUT/prefill-$wl.log" 2>&1
  echo "bench_torch prefill $wl rc=$? at $SECONDS s"
  grep -hE "median|WRONG|FAILED|Error| / " "$OUT/prefill-$wl.log" | head -10
  triton_cache_save
done
echo "done at $SECONDS s"
date -u
