#!/usr/bin/env bash
# Session 39, call 4 (~310 s, the budget's last ~400 s after three refused starts): tsave (main = pse, plus the saving forward's state pass
# storing S0 and V_new by TMA beside the output, kTmaOut) and dov (tsave plus the products kernel's dO' staged in
# 16-byte pieces) against pse. Checks on dov (it holds tsave's code): the Hopper / saved backward GPU tests, the new
# saving-forward output tests and the Hopper forward tests beside backward-quick (backward-full did not fit the budget); then gpu_ab.sh pse,tsave,dov at
# train-h64-fixed, one round (the budget left after two refused starts).
# Run as: OUT=$OUT bash .carry/lease/s39_l4.sh
#   carry [".carry/lease", ".carry/ab/pse.tar.xz", ".carry/ab/tsave.tar.xz", ".carry/ab/dov.tar.xz",
#          ".carry/ab/pse.COMMIT", ".carry/ab/tsave.COMMIT", ".carry/ab/dov.COMMIT"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l4
lease_unpack pse tsave dov
pids=()
lease_run tests dov 4 150 ./kda_gpu_tests \
  --gtest_filter='*Wgmma*:*HopperBackward*:*BackwardSaved*:*CudaBackwardBehaviour*:CudaHopper.*' & pids+=($!)
lease_run bq dov 4 150 ./kda-verify --impl cuda-generic --suite backward-quick & pids+=($!)
wait "${pids[@]}"
for n in bq; do
  lease_passed $n && echo "dov: $n passed" || echo "dov: $n FAILED"
done
grep -hE "^bwd_" "$W"/bq.log | cut -c1-160
grep -hE "^\[  (FAILED|PASSED) |tests? ran|saving forward" "$W/tests.log" | head -20
lease_checks_done
mkdir -p "$OUT/ab"
OUT=$OUT/ab timeout 130 bash scripts/gpu_ab.sh --builds pse,tsave,dov --impl cuda-generic --rounds 1 --workload train-h64-fixed; echo "gpu_ab rc=$?"
date -u
