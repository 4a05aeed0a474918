#!/usr/bin/env bash
# Prepared in session 65 as the next session's first call: session 64's s65_l1.sh with chainregpy in place of chainreg
# (the same kernels, 6fb03d5, plus its PyTorch op: scripts/gpu_build.sh --python --ab chainregpy), so that one call
# also times chainreg beside FLA when it passes, since starts often fail and a second call may not come.
# 1  chainregpy's checks in parallel: kda-verify --suite full under cuda-generic, the GPU tests but backward / stress /
#    decode (WgmmaLayout's two RS probes among them), backward-quick (the recompute's state pass is the same kernel)
# 2  if the full suite passed: gpu_ab main63,chainregpy at h64-fixed and h96-fixed, 2 rounds, every run verified;
#    then h64-fixed and h96-fixed beside FLA through chainregpy's op (bench_torch, 100 graph replays; Triton's cache
#    carried in and handed back)
# 3  while LIMIT (default 560 s) allows: ncu, every state_wgmma launch of one h64-fixed step, chainregpy's, and
#    statediag's in modes 0 (= main63), 1 (no loads after the first chunk), 2 (no output products), 4 (no chain
#    products), 3 and 7
# Run as OUT=$OUT bash .carry/lease/s66_l1.sh with .carry/slim.sh on and timeout_s 600, carry [".carry/lease", ".whl",
# ".carry/triton", ".carry/ab/main63.tar.xz", ".carry/ab/main63.COMMIT", ".carry/ab/chainregpy.tar.xz",
# ".carry/ab/chainregpy.COMMIT", ".carry/ab/statediag.tar.xz", ".carry/ab/statediag.COMMIT"] (~46 MB). Returns
# s66_l1.log, ab/results.tar, final.tgz, prefill.tgz and the Triton cache's two parts.
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s66_l1
lease_unpack main63 chainregpy statediag
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lim=${LIMIT:-560}
pids=()
lease_run full-chainreg chainregpy 4 280 ./kda-verify --impl cuda-generic --suite full & pids+=($!)
lease_run gtests-chainreg chainregpy 4 280 ./kda_gpu_tests --gtest_filter='-*Backward*:*Stress*:*Decode*' & pids+=($!)
lease_run bq-chainreg chainregpy 3 200 ./kda-verify --impl cuda-generic --suite backward-quick & pids+=($!)
wait "${pids[@]}"
echo "checks done at $SECONDS s"
for n in full-chainreg bq-chainreg; do grep -hE " FAIL |kda-verify:|near_identical_keys_beta_at_2" "$W/$n.log" | cut -c1-230 | head -12; done
grep -hE "^\[  (FAILED|PASSED) |tests? ran|FromRegisters" "$W/gtests-chainreg.log" | head
lease_checks_done final
if lease_passed full-chainreg; then
  lease_ab main63,chainregpy 120 h64-fixed h96-fixed
  left=$((lim - 120 - SECONDS))  # 120 s kept for step 3
  [ "$left" -gt 100 ] && lease_torch_prefill chainregpy "$left" h64-fixed h96-fixed
fi
[ $((lim - SECONDS)) -gt 60 ] && lease_ncu_launches chainregpy h64-fixed "state_wgmma"
for m in 0 1 2 4 3 7; do
  [ $((lim - SECONDS)) -gt 30 ] || { echo "statediag $m skipped at $SECONDS s"; continue; }
  echo "-- statediag KDA_STATE_DIAG=$m"
  KDA_STATE_DIAG=$m lease_ncu_launches statediag h64-fixed "state_wgmma"
done
lease_checks_done final  # again, with the ncu logs (the first one is there should the call be cut off)
echo "done at $SECONDS s"
date -u
