#!/usr/bin/env bash
# Session 52, call 4: issue #6's few-heads workloads beside FLA in one process (bench_torch --part prefill --impl kda
# --impl fla --iters 100, graph replay) on BUILD (call 3's better plan): h4-32k (segwg landed: 688 us on gpu_ab) and
# h16-32k, plus the workloads given after it. FLA compiles anew for each H on a fresh machine (~1-5 min). Then the
# combine kernel under ncu's full set (gpu_ab --ncu).
# Run as: OUT=$OUT bash .carry/lease/s52_l4.sh BUILD [WORKLOAD...]
#   carry [".carry/lease", ".carry/ab/BUILD.tar.xz", ".carry/ab/BUILD.COMMIT", ".whl"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
b=$1
shift
lease_begin s52_l4
lease_unpack "$b"
lease_triton_cache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
wl=()
for w in h4-32k h16-32k "$@"; do wl+=(--workload "$w"); done
LD_LIBRARY_PATH=/tmp/ab/$b KDA_TORCH_LIBRARY=/tmp/ab/$b/libkda_torch.so PYTHONPATH="/tmp/site:$PWD/python" \
  timeout 420 python3 scripts/bench_torch.py --part prefill "${wl[@]}" --impl kda --impl fla --iters 100 \
  --commit "$(cut -c1-7 .carry/ab/$b.COMMIT)" --json "$OUT/prefill-$b.json" > "$OUT/prefill-$b.log" 2>&1
echo "== prefill $b rc=$?"
grep -vE "^\s*$" "$OUT/prefill-$b.log" | tail -30
date -u
# The segments' combine (45 us at h4-32k, 3.2 us a step against ~1 us of issue): ncu's full set with source of one
# launch, to read here (scripts/ncu_stages.py).
mkdir -p "$OUT/ncu"
OUT=$OUT/ncu timeout 120 bash scripts/gpu_ab.sh --builds "$b" --rounds 0 --ncu combine_kernel --ncu-count 1 \
  --workload h4-32k > "$OUT/ncu/gpu_ab.log" 2>&1
echo "== ncu combine rc=$?"
date -u
