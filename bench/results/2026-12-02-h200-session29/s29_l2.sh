#!/usr/bin/env bash
# Session 29, call 2 (~330 s; run with timeout_s 590): call 1's gradspec A/B ran the generic instance (kda-bench wrote
# fp32 gradients); kda-bench's train-* now write them in the inputs' dtypes (bf16), as autograd does, so gradspec's
# bf16 / bounded instance runs. Builds: main = the bench change + kda-verify --input-dtype-grads, gradspec = main +
# the patch. Checks: backward-quick with bf16 gradients main / gradspec at one fresh seed (the same figures: the
# instance keeps every operation); gradspec's backward-full with bf16 gradients (its three bf16 instances on every
# case with bf16 inputs) and its backward / stress GPU tests. Then the A/B at train-h64-fixed (2 rounds) and
# train-h96-fixed (1 round) and the gradient kernel's launches under ncu (which instance ran).
# Run as: OUT=$OUT bash .carry/lease/s29_l2.sh   carry [".carry/lease", ".carry/ab/main.tar.xz", ".carry/ab/gradspec.tar.xz"].
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l2
lease_unpack main gradspec
mkdir -p "$OUT/ab" "$OUT/ab96"
OUT=$OUT/ab timeout 150 bash scripts/gpu_ab.sh --builds main,gradspec --impl cuda-generic --rounds 2 \
  --workload train-h64-fixed
echo "gpu_ab rc=$?"; date -u
for b in main gradspec; do lease_ncu_launches $b train-h64-fixed 'grad_kernel'; done
cp "$W"/ncu-*.txt "$OUT/" 2>/dev/null
lease_same_figures "backward-quick --input-dtype-grads" main gradspec
pids=()
lease_run tests gradspec 2 220 ./kda_gpu_tests --gtest_filter='*Backward*:*Stress*' & pids+=($!)
lease_bwd_full gradspec --input-dtype-grads & pids+=($!)
wait "${pids[@]}"
for n in bwdfull-a bwdfull-b bwdfull-c bwdfull-d; do
  lease_passed $n && echo "gradspec: $n passed" || echo "gradspec: $n FAILED"
done
grep -hE "^bwd_" "$W"/bwdfull-*.log | cut -c1-160
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/tests.log" | head -20
lease_checks_done
OUT=$OUT/ab96 timeout 120 bash scripts/gpu_ab.sh --builds main,gradspec --impl cuda-generic --rounds 1 \
  --workload train-h96-fixed
echo "gpu_ab rc=$?"; date -u
