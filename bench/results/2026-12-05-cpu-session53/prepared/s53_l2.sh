#!/usr/bin/env bash
# Session 53 (prepared), call 2: revplan (branch revplan: the backward's reverse pass planned with the forward's
# pricing, tile_step_cost(wgmma64)) against main53. Only few heads change plan: train-kimi-8k (H = 32: 64 wgmma
# CTAs of 64 columns instead of 128 generic ones of 32), train-h16-32k (32 instead of 64); train-h64-fixed is the
# control (the same plan either way).
#   1  revplan's backward checks: backward-quick and the backward / stress GPU tests (their few-head cases now run
#      the wgmma reverse pass where they ran generic 32-column tiles)
#   2  gpu_ab main53,revplan, 2 rounds: train-kimi-8k, train-h16-32k, train-h64-fixed
# ~300 s + start. Run as: OUT=$OUT bash .carry/lease/s53_l2.sh
# carry [".carry/lease", ".carry/ab/main53.tar.xz", ".carry/ab/revplan.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s53_l2
lease_unpack main53 revplan
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lease_bwd_quick revplan
if lease_passed bq && grep -q "^\[  PASSED  \]" "$W/tests.log" && ! grep -q "^\[  FAILED  \]" "$W/tests.log"; then
  lease_ab main53,revplan 300 train-kimi-8k train-h16-32k train-h64-fixed
else
  echo "revplan failed its backward checks: no timing"
fi
date -u
