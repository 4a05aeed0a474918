#!/usr/bin/env bash
# Prepared in session 20 for session 21's third device call (~300 s): the merge of the winners (default all3 =
# branch all3, f704d9e: main + s2p + lpt + pdl, merged without conflicts; CPU tests pass) checked, then beside FLA
# in one process (six prefill workloads, the training step): issue #3's criterion 4.
# Run as: BUILD=all3 OUT=$OUT bash .carry/lease/s21_l3_prepared.sh   with carry [".carry/lease",
# ".carry/ab/BUILD.tar.xz", ".carry/ab/BUILD.COMMIT", ".whl", ".carry/triton.tgz"] (Triton's cache comes back as
# $OUT/triton.tgz.part-*: join with cat into .carry/triton.tgz; the bench's logs and JSON in $OUT/peers.tgz).
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l3.log") 2>&1
date -u
BUILD=${BUILD:-all3}
W=$(mktemp -d)
source scripts/lease_lib.sh
lease_unpack "$BUILD"
SF=14035002217949444255 SB=15368221980386543344
F='Wgmma*:Own/CudaHopper.*:Cases/CudaHopperBackward.*:CudaBehaviour.*:Backends/CudaBackwardDeterminism.*'
pids=()
lease_run verify-full "$BUILD" 10 200 ./kda-verify --suite full --impl cuda-generic --seed $SF & pids+=($!)
lease_run verify-bwdq "$BUILD" 4 200 ./kda-verify --suite backward-quick --impl cuda-generic --seed $SB & pids+=($!)
lease_run tests "$BUILD" 2 200 ./kda_gpu_tests --gtest_filter="$F" & pids+=($!)
wait "${pids[@]}"  # never a bare wait (the tee above)
grep -hE "FAILED|Failure|FAIL " "$W"/*.log | head -20
(cd "$W" && tar -czf "$OUT/checks.tgz" .)
date -u
grep -q "39 passed, 0 failed" "$W/verify-full.log" && grep -q "21 passed, 0 failed" "$W/verify-bwdq.log" ||
  { echo "$BUILD failed its checks: not timed"; exit 0; }
mkdir -p "$OUT/peers"
BUILD=$BUILD OUT=$OUT/peers timeout 200 bash .carry/lease/s20_l3_prepared.sh
# At most 8 files come back: the bench's logs and JSON in one archive, the Triton cache's parts beside it.
(cd "$OUT/peers" && tar -czf "$OUT/peers.tgz" l3.log peers_* && mv triton.tgz.part-* "$OUT/" && cd .. && rm -rf peers)
ls "$OUT"
date -u
