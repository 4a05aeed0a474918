#!/usr/bin/env bash
# Prepared in session 15 for session 16's first device call (not yet run; session 15's device time ran out). Three
# builds against main, none changing a value (their verifier figures must equal main's line for line):
#   split = branch statesplit (4c492f7): the last wave of equal-length chains of the forward's state pass and the
#           backward's reverse pass in 32-column tiles, as a second launch (chunk_map.h plan_state_pass). Predicted:
#           h96-fixed -100 to -200 us (its second wave's 60 CTAs of 64 columns left 72 SMs idle ~780 us; cost model
#           224 against 256), train-h96-fixed's backward -100 to -300 us; h64-fixed unchanged (the same plan).
#   s4ov  = branch s4overlap at e39e420: phase 1's X_K / X_V plane splits on warps 8-15 (after their A_qk stores)
#           during S4's rounds (round 0 on warps 0-7, rounds 1-3 on warps 0-2, each ordered by a named barrier).
#           Predicted: -40 to -120 us at h64-fixed, -60 to -180 at h96-fixed (~8.5 K of ~74 K warp instructions per
#           (chunk, head) move into rounds where 8-15 warps idled); the backward's recompute (kWide) unchanged.
#   s3ov  = branch s4overlap's tip (c7bc23e): + S3's off-diagonal blocks finished behind a named barrier of warps
#           0-11, not after the diagonal warps' 16 k-steps. Predicted: a further -10 to -40 us at h64-fixed.
#   combo = branch combo15 (7bb4221): s3ov merged with split, what main gets if both win (their gains add: they
#           change different kernels).
# Archives in .carry/ab (scripts/gpu_build.sh in each checkout; copy .carry/bin.tar.xz to .carry/ab/NAME.tar.xz):
#   main = main (fae11e2 in session 15, built with --torch-wheel; rebuild at main's head if .carry is gone), split,
#          s4ov, s3ov, combo. main's fused decode (52f6ce3 shares the conv step between its two forms) is checked here
#          too, by its GPU tests and by decode-full's new fused cases (33eeaec).
# Run as: OUT=$OUT bash .carry/lease/s16_l1_prepared.sh   with carry [".carry/lease", ".carry/ab"] (~340 s).
# Expected: verify-full-s3ov.log equal to session 15's l1/verify-full-main.log line for line (times aside),
# verify-bwdq-s3ov.log to l1/verify-bwdq-main.log, verify-h96-split.log to verify-full-main.log's workload_h96 lines.
# A second call then: gpu_ab --builds main,split --workload train-h96-fixed (the reverse pass's split), and
# h96-mixed (unchanged plan: a control).
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l1.log") 2>&1
date -u
for b in main split s3ov; do mkdir -p /tmp/ab/$b && tar -xJf .carry/ab/$b.tar.xz -C /tmp/ab/$b; done
W=$(mktemp -d)
run() {  # name build timeout cmd...
  local n=$1 b=$2 t=$3; shift 3
  ( cd /tmp/ab/$b && OMP_NUM_THREADS=5 LD_LIBRARY_PATH=. timeout "$t" "$@" > "$W/$n.log" 2>&1; echo "== $n rc=$? $(tail -n 1 "$W/$n.log")" )
}
SF=14035002217949444255 SB=15368221980386543344
pids=()
run verify-h96-split split 200 ./kda-verify --suite full --impl cuda-generic --seed $SF --filter workload_h96 & pids+=($!)
run verify-full-s3ov s3ov 260 ./kda-verify --suite full --impl cuda-generic --seed $SF & pids+=($!)
run verify-bwdq-s3ov s3ov 200 ./kda-verify --suite backward-quick --impl cuda-generic --seed $SB & pids+=($!)
run tests-fused-main main 150 ./kda_gpu_tests --gtest_filter='*CudaFusedDecode*' & pids+=($!)
run verify-dec-fused-main main 150 ./kda-verify --suite decode-full --impl cuda-generic --filter fused & pids+=($!)
wait "${pids[@]}"  # never a bare wait: it would also wait for the tee above
grep -hE "FAIL|Failure" "$W"/*.log | head -20
(cd "$W" && tar -cf "$OUT/checks.tar" .)
date -u
OUT=$OUT timeout 300 bash scripts/gpu_ab.sh --builds main,split,s4ov,s3ov,combo --impl cuda-generic --rounds 1 \
  --workload h64-fixed --workload h96-fixed
echo "gpu_ab rc=$?"
date -u
