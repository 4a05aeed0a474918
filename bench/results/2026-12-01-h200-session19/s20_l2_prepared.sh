#!/usr/bin/env bash
# Prepared in session 19 for session 20's second device call (~480 s): kda (BUILD: call 1's winner, default ssp)
# beside FLA in one process, prefill on the six standard workloads (issue #3 criterion 4; session 19 measured only
# across calls after the TMA state pass: 1.04-1.14) and the training step at train-h64-fixed (issue #9; session 17:
# 1.89x FLA), then ncu with source of BUILD's state and reverse passes (what holds them after the TMA copies and the
# plane-store addressing).
# Run as: BUILD=ssp OUT=$OUT bash .carry/lease/s20_l2_prepared.sh   with carry [".carry/lease", ".carry/ab", ".whl",
# ".carry/triton.tgz"] (.carry/triton.tgz: FLA's Triton cache from session 19's prefill run, 41 MB; with the three
# archives of .carry/ab, ~16 MB, the carry is ~58 of its 64 MiB: add no archive).
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l2.log") 2>&1
date -u
BUILD=${BUILD:-ssp}
mkdir -p /tmp/ab/$BUILD && tar -xJf .carry/ab/$BUILD.tar.xz -C /tmp/ab/$BUILD
export TRITON_CACHE_DIR=/tmp/kda-triton-cache; mkdir -p $TRITON_CACHE_DIR
[ -f .carry/triton.tgz ] && tar -xzf .carry/triton.tgz -C /tmp
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
bt() {  # part timeout [--workload W]...
  local part=$1 t=$2; shift 2
  PYTHONUNBUFFERED=1 KDA_TORCH_LIBRARY=/tmp/ab/$BUILD/libkda_torch.so PYTHONPATH="/tmp/site:$PWD/python" timeout $t \
    python3 scripts/bench_torch.py --part $part "$@" --commit "$(cat .carry/ab/$BUILD.COMMIT)" --json "$OUT/peers_$part.json" \
    > "$OUT/peers_$part.log" 2>&1; echo "$part rc=$?"
  grep -h -E "median|WRONG|FAILED|Error| / |floor" "$OUT/peers_$part.log" | head -40
}
bt prefill 240
bt train 150 --workload train-h64-fixed
date -u
for x in "state_wgmma h64-fixed" "reverse_wgmma train-h64-fixed"; do
  set -- $x; mkdir -p "$OUT/ncu-$1"
  OUT=$OUT/ncu-$1 timeout 60 bash scripts/gpu_ab.sh --builds $BUILD --impl cuda-generic --rounds 0 --ncu $1 \
    --ncu-count 1 --workload $2
  echo "gpu_ab ncu $x rc=$?"
done
(cd /tmp && timeout 40 tar -czf - kda-triton-cache | split -b 15M -d - "$OUT/triton.tgz.part-")
date -u
