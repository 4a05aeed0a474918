#!/usr/bin/env bash
# Prepared in session 14 for session 15's first device call (not yet run): checks and times what session 14 landed
# after its lease. Archives in .carry/ab (scripts/gpu_build.sh; copy .carry/bin.tar.xz to .carry/ab/NAME.tar.xz):
#   base = 031e9c8 (= session 14's measured rows2: prefill 85fffdf, the row-split decode), built in a worktree;
#   cuts = 0336913 (+ the bit-identical phase-1 cuts and bf16 pools), built in a worktree;
#   main = c0dc4e5 (main's head) (+ e5ba7d9's 3xTF32 small part unrounded: last-digit changes), built with --torch-wheel.
# One round per build (~70 s each with the oracles): a second round, or serve-256x32, is a second call.
# Run as: OUT=$OUT bash .carry/lease/s15_l1_prepared.sh   with carry [".carry/lease", ".carry/ab"].
# Expected: cuts' verifier figures equal base's line for line on the prefill and backward suites (its phase-1 cuts are
# bit-identical by construction; session 14's logs l2/verify-full-rows.log and l1/verify-bwdq-tf32op.log hold the
# same seeds' figures); main's within the last digits of cuts'; decode-full 14/14 with the bf16 case; the ledger's
# session 14 predictions for the timings.
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l1.log") 2>&1
date -u
for b in base cuts main; do mkdir -p /tmp/ab/$b && tar -xJf .carry/ab/$b.tar.xz -C /tmp/ab/$b; done
W=$(mktemp -d)
run() {  # name build timeout cmd...
  local n=$1 b=$2 t=$3; shift 3
  ( cd /tmp/ab/$b && OMP_NUM_THREADS=3 LD_LIBRARY_PATH=. timeout "$t" "$@" > "$W/$n.log" 2>&1; echo "== $n rc=$? $(tail -n 1 "$W/$n.log")" )
}
SF=14035002217949444255 SB=15368221980386543344 SD=1862009593585421415
pids=()
run verify-full-cuts cuts 260 ./kda-verify --suite full --impl cuda-generic --seed $SF & pids+=($!)
run verify-bwdq-cuts cuts 200 ./kda-verify --suite backward-quick --impl cuda-generic --seed $SB & pids+=($!)
run verify-full-main main 260 ./kda-verify --suite full --impl cuda-generic --seed $SF & pids+=($!)
run verify-bwdq-main main 200 ./kda-verify --suite backward-quick --impl cuda-generic --seed $SB & pids+=($!)
run verify-dec-main main 200 ./kda-verify --suite decode-full --impl cuda-generic --seed $SD & pids+=($!)
run tests-main main 260 ./kda_gpu_tests --gtest_filter='*CudaChunked*:*Behaviour*:*Decode*:*CudaBackward*-*CudaDecodePaths*b512*:Large/CudaBackward.*' & pids+=($!)
wait "${pids[@]}"  # never a bare wait: it would also wait for the tee above (session 13 lost 630 s to it)
grep -hE 'FAIL|Failure' "$W"/*.log | head -20
(cd "$W" && tar -cf "$OUT/checks.tar" .)
date -u
OUT=$OUT timeout 300 bash scripts/gpu_ab.sh --builds base,cuts,main --impl cuda-generic --rounds 1 \
  --workload h64-fixed --workload h96-fixed --workload train-h64-fixed \
  --workload decode-h32-b1 --workload decode-h32-b256
echo "gpu_ab rc=$?"
# bf16 pools exist in main only (base's kda-bench does not know the workloads): fp32 and bf16 side by side there.
(cd /tmp/ab/main && LD_LIBRARY_PATH=. timeout 90 ./kda-bench --commit main --impl cuda-generic --iters 200 \
  $(for b in 1 32 256; do echo --workload decode-h32-b$b --workload decode-h32-b$b-bf16; done) \
  --json "$OUT/decode-bf16.json" > "$OUT/decode-bf16.log" 2>&1; echo "bf16 rc=$?")
grep -E "^decode|median" "$OUT/decode-bf16.log" | sed 's/ (seed.*//; s/(min.*sets)//'
date -u
