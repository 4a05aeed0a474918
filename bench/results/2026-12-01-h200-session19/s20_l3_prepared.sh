#!/usr/bin/env bash
# Prepared in session 19 for session 20's third device call (~450 s): kda (BUILD: the winner of s20_l1 / s20_l2,
# default ssp) beside FLA in one process, prefill on the six standard workloads (issue #3 criterion 4; after the TMA
# state pass session 19 measured only across calls: 1.04-1.14) and the training step at train-h64-fixed (issue #9;
# session 17: 1.89x FLA). FLA's Triton cache travels in .carry/triton.tgz (session 19's prefill run, 41 MB) and
# comes back as $OUT/triton.tgz.part-* (join with cat, save to .carry/triton.tgz).
# Run as: BUILD=ssp OUT=$OUT bash .carry/lease/s20_l3_prepared.sh   with carry [".carry/lease",
# ".carry/ab/ssp.tar.xz", ".carry/ab/ssp.COMMIT", ".whl", ".carry/triton.tgz"] (BUILD's two files only: with all five
# archives of .carry/ab, ~26 MB, and the 41 MB Triton cache the carry would pass its 64 MiB).
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l3.log") 2>&1
date -u
BUILD=${BUILD:-ssp}
mkdir -p /tmp/ab/$BUILD && tar -xJf .carry/ab/$BUILD.tar.xz -C /tmp/ab/$BUILD
export TRITON_CACHE_DIR=/tmp/kda-triton-cache; mkdir -p $TRITON_CACHE_DIR
[ -f .carry/triton.tgz ] && tar -xzf .carry/triton.tgz -C /tmp
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
bt() {  # part timeout [--workload W]...
  local part=$1 t=$2; shift 2
  PYTHONUNBUFFERED=1 KDA_TORCH_LIBRARY=/tmp/ab/$BUILD/libkda_torch.so PYTHONPATH="/tmp/site:$PWD/python" timeout $t \
    python3 scripts/bench_torch.py --part $part "$@" --commit "$(cat .carry/ab/$BUILD.COMMIT)" \
    --json "$OUT/peers_$part.json" > "$OUT/peers_$part.log" 2>&1; echo "$part rc=$?"
  grep -h -E "median|WRONG|FAILED|Error| / |floor" "$OUT/peers_$part.log" | head -40
}
bt prefill 240
bt train 150 --workload train-h64-fixed
(cd /tmp && timeout 40 tar -czf - kda-triton-cache | split -b 15M -d - "$OUT/triton.tgz.part-")
date -u
