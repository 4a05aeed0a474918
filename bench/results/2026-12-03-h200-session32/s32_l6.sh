#!/usr/bin/env bash
# Session 32, call 6 (the session's last ~400 s of device time): issue #9's training step through the torch op beside
# FLA on two more standard workloads, one process each (FLA's Triton kernels compile on this fresh machine first):
# train-h96-fixed, then train-h64-mixed (packed, int32 cu_seqlens), fla / kda / kda-saved, main = 32a25f5.
# Run as: OUT=$OUT bash .carry/lease/s32_l6.sh
#   carry [".carry/lease", ".carry/ab/main.tar.xz", ".carry/ab/main.COMMIT", ".whl"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l6
lease_unpack main
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
commit=$(cut -c1-7 .carry/ab/main.COMMIT)
export LD_LIBRARY_PATH=/tmp/ab/main KDA_TORCH_LIBRARY=/tmp/ab/main/libkda_torch.so PYTHONPATH="/tmp/site:$PWD/python"
for x in h96-fixed:200 h64-mixed:140; do
  wl=${x%%:*} lim=${x##*:}
  timeout $lim python3 scripts/bench_torch.py --part train --workload train-$wl --impl fla --impl kda --impl kda-saved \
    --iters 20 --commit "$commit" --json "$OUT/peers_train_$wl.json" > "$OUT/peers_train_$wl.log" 2>&1
  echo "bench_torch train-$wl rc=$?"
  grep -hE "^train|median|WRONG|FAILED|Error|/ fla" "$OUT/peers_train_$wl.log" | head -12
  date -u
done
