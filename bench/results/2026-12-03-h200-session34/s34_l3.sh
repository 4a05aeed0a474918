#!/usr/bin/env bash
# Prepared in session 33 for the next session's first device call (~590 s: run with timeout_s 600): issue #9's training
# step through the torch op beside FLA on main with tcgrad (the gradient pass's tensor-core pair products), one process
# a workload, FLA's Triton kernels compiling on the fresh machine during the first: train-h64-fixed (session 32 before
# tcgrad: FLA 8069.9 us, kda 10824.6, kda-saved 9788.0), then train-h96-fixed and train-h64-mixed (packed, int32
# cu_seqlens), never run through the op beside FLA so far.
# Run as: OUT=$OUT bash .carry/lease/s34_l1_prepared.sh
#   carry [".carry/lease", ".carry/ab/tcrows.tar.xz", ".carry/ab/tcrows.COMMIT", ".whl"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l3
lease_unpack tcrows
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
commit=$(cut -c1-7 .carry/ab/tcrows.COMMIT)
export LD_LIBRARY_PATH=/tmp/ab/tcrows KDA_TORCH_LIBRARY=/tmp/ab/tcrows/libkda_torch.so PYTHONPATH="/tmp/site:$PWD/python"
for x in h64-fixed:300; do
  wl=${x%%:*} lim=${x##*:}
  timeout $lim python3 scripts/bench_torch.py --part train --workload train-$wl --impl fla --impl kda --impl kda-saved \
    --iters 20 --commit "$commit" --json "$OUT/peers_train_$wl.json" > "$OUT/peers_train_$wl.log" 2>&1
  echo "bench_torch train-$wl rc=$?"
  grep -hE "^train|median|WRONG|FAILED|Error|/ fla" "$OUT/peers_train_$wl.log" | head -12
  date -u
done
