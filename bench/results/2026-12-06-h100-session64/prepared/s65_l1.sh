#!/usr/bin/env bash
# Prepared in session 64 for the next session's first call: chainreg (branch chainreg, 6fb03d5: the state pass's chain
# transposed at 64 tokens, its products' A from registers, so they read only W and Kd from shared memory and never the
# chain's own planes; docs/hopper.md "Order of work" step 2) checked and timed against main63, and the state pass's
# step timed in parts (statediag, a diagnostic never for main: KDA_STATE_DIAG).
# 1  chainreg's checks in parallel: kda-verify --suite full under cuda-generic, the GPU tests but backward / stress /
#    decode (WgmmaLayout's two RS probes among them), backward-quick (the recompute's state pass is the same kernel)
# 2  gpu_ab main63,chainreg at h64-fixed and h96-fixed, 2 rounds, every run verified (if the full suite passed)
# 3  ncu, every state_wgmma launch of one h64-fixed step: chainreg's, and statediag's in modes 0 (= main63), 1 (no
#    loads after the first chunk), 2 (no output products), 4 (no chain products), 3 and 7
# Run as OUT=$OUT bash .carry/lease/s65_l1.sh with .carry/slim.sh on, carry [".carry/lease",
# ".carry/ab/main63.tar.xz", ".carry/ab/main63.COMMIT", ".carry/ab/chainreg.tar.xz", ".carry/ab/chainreg.COMMIT",
# ".carry/ab/statediag.tar.xz", ".carry/ab/statediag.COMMIT"]; ~330 s.
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s65_l1
lease_unpack main63 chainreg statediag
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
pids=()
lease_run full-chainreg chainreg 4 280 ./kda-verify --impl cuda-generic --suite full & pids+=($!)
lease_run gtests-chainreg chainreg 4 280 ./kda_gpu_tests --gtest_filter='-*Backward*:*Stress*:*Decode*' & pids+=($!)
lease_run bq-chainreg chainreg 3 200 ./kda-verify --impl cuda-generic --suite backward-quick & pids+=($!)
wait "${pids[@]}"
echo "checks done at $SECONDS s"
for n in full-chainreg bq-chainreg; do grep -hE " FAIL |kda-verify:|near_identical_keys_beta_at_2" "$W/$n.log" | cut -c1-230 | head -12; done
grep -hE "^\[  (FAILED|PASSED) |tests? ran|FromRegisters" "$W/gtests-chainreg.log" | head
lease_passed full-chainreg && lease_ab main63,chainreg 120 h64-fixed h96-fixed
lease_ncu_launches chainreg h64-fixed "state_wgmma"
for m in 0 1 2 4 3 7; do
  echo "-- statediag KDA_STATE_DIAG=$m"
  KDA_STATE_DIAG=$m lease_ncu_launches statediag h64-fixed "state_wgmma"
done
lease_checks_done final
echo "done at $SECONDS s"
date -u
