#!/usr/bin/env bash
# Session 52, call 3: wgplan (1daeb42: state-pass plans price a 32-column generic chunk step as a 64-column wgmma one
# where wgmma runs) against wl (306e54a: main with the h16-32k workload, the plans before).
#   1  wgplan's forward checks (kda-verify --suite full, the forward GPU tests: the _segments cases and
#      SegmentCasesSplitTheirChains under both pricings)
#   2  every launch of one h16-32k step under ncu on both builds (wl: 64 generic CTAs of 32 columns, unsplit;
#      wgplan: pass 1 / combine / pass 2 of 4 segments on state_wgmma_kernel)
#   3  gpu_ab wl,wgplan, 2 rounds: h16-32k (predicted state pass ~1.95 -> ~1.3 ms), kimi-8k (H = 32: 128 generic
#      CTAs of 32 columns -> 64 wgmma CTAs of 64; predicted about equal), h4-32k (the same plan: a control)
# Run as: OUT=$OUT bash .carry/lease/s52_l3.sh   carry [".carry/lease", ".carry/ab/wl.tar.xz", ".carry/ab/wgplan.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s52_l3
lease_unpack wl wgplan
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
if lease_fwd_checks wgplan; then
  lease_ncu_launches wl h16-32k .
  lease_ncu_launches wgplan h16-32k .
  lease_ab wl,wgplan 300 h16-32k kimi-8k h4-32k
else
  echo "wgplan failed its forward checks: no timing"
  lease_ncu_launches wgplan h16-32k .
fi
