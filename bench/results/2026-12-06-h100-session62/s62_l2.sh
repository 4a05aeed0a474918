#!/usr/bin/env bash
# Session 62, call 2: issue #6 beside FLA in one process (scripts/bench_torch.py --part prefill, kda and FLA, 100 graph
# replays) at h64-fixed, then h96-fixed, with BUILD's libkda_torch.so (default main63, main's kernels d12886f), the
# first same-run figures since session 57 (s2half, 0.707x / 0.728x). FLA's Triton compile on a cold cache is ~300 s a
# workload, so each workload runs under its own limit and Triton's cache is handed back after each
# (scripts/triton_cache.sh: copy $OUT/triton to .carry/triton here for the next call).
# Run as OUT=$OUT bash .carry/lease/s62_l2.sh [BUILD] with .carry/slim.sh on, carry [".carry/lease", ".whl",
# ".carry/ab/BUILD.tar.xz", ".carry/ab/BUILD.COMMIT"] (and ".carry/triton" once there is one); <= ~560 s.
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s62_l2
b=${1:-main63}
lease_unpack "$b"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lease_wheels
triton_cache_restore
commit=$(cut -c1-7 ".carry/ab/$b.COMMIT")
for w in h64-fixed h96-fixed; do
  left=$((540 - SECONDS))
  [ "$left" -gt 60 ] || { echo "skip $w: $left s left"; continue; }
  LD_LIBRARY_PATH="/tmp/ab/$b" KDA_TORCH_LIBRARY="/tmp/ab/$b/libkda_torch.so" PYTHONPATH="/tmp/site:$PWD/python" \
    timeout "$left" python3 scripts/bench_torch.py --part prefill --workload "$w" --impl kda --impl fla --iters 100 \
    --commit "$commit" --json "$OUT/prefill-$w.json" > "$OUT/prefill-$w.log" 2>&1
  echo "bench_torch prefill $w rc=$? at $SECONDS s"
  grep -hE "median|WRONG|FAILED|Error| / " "$OUT/prefill-$w.log" | head -20
  triton_cache_save
done
echo "done at $SECONDS s"
date -u
