#!/usr/bin/env bash
# Prepared in session 21 for session 22's third device call (~400 s): m22 (main + dred + wtma + rec + recsave + revov,
# de61157; merged without conflicts, CPU tests pass) checked with fresh seeds, then beside FLA in one process: the
# six prefill workloads, the training step, the decode batch sweep (s20_l3_prepared.sh runs prefill and train; the
# decode part here).
# Use it if its five changes win (dred4, s22_l1, is not in it); otherwise build the merge of the winners and run it
# with BUILD=name.
# Run as: BUILD=m22 OUT=$OUT bash .carry/lease/s22_l3_prepared.sh   with carry [".carry/lease",
# ".carry/ab/m22.tar.xz", ".carry/ab/m22.COMMIT", ".whl", ".carry/triton.tgz"].
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-m22}
source scripts/lease_lib.sh
lease_begin l3
lease_unpack "$BUILD"
pids=()
lease_run verify-full "$BUILD" 6 240 ./kda-verify --suite full --impl cuda-generic & pids+=($!)
lease_run verify-bwdq "$BUILD" 2 200 ./kda-verify --suite backward-quick --impl cuda-generic & pids+=($!)
lease_run verify-dec "$BUILD" 4 200 ./kda-verify --suite decode-full --impl cuda-generic & pids+=($!)
lease_run verify-bwd96 "$BUILD" 2 200 ./kda-verify --suite backward-full --filter one_sequence_96 --impl cuda-generic \
  & pids+=($!)
wait "${pids[@]}"  # never a bare wait (the tee above)
lease_checks_done
lease_passed verify-full && lease_passed verify-bwdq && lease_passed verify-bwd96 ||
  { echo "$BUILD failed its checks: not timed"; exit 0; }
mkdir -p "$OUT/peers"
BUILD=$BUILD OUT=$OUT/peers timeout 330 bash .carry/lease/s20_l3_prepared.sh
# The decode sweep beside FLA (bench_torch.py --part decode), FLA from the wheels s20_l3_prepared.sh installed.
R=$PWD
PYTHONUNBUFFERED=1 KDA_TORCH_LIBRARY=/tmp/ab/$BUILD/libkda_torch.so PYTHONPATH="/tmp/site:$R/python" \
  TRITON_CACHE_DIR=/tmp/kda-triton-cache timeout 120 python3 scripts/bench_torch.py --part decode \
  --commit "$(cat .carry/ab/$BUILD.COMMIT)" --json "$OUT/peers/peers_decode.json" > "$OUT/peers/peers_decode.log" 2>&1
echo "decode rc=$?"
grep -E " / |median" "$OUT/peers/peers_decode.log" | head -30
(cd "$OUT/peers" && tar -czf "$OUT/peers.tgz" l3.log peers_* && mv triton.tgz.part-* "$OUT/" && cd .. && rm -rf peers)
ls "$OUT"; date -u
