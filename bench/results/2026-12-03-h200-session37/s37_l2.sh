#!/usr/bin/env bash
# Session 37, call 2 (~520 s): rsq (kept from call 1: -55 us backward, -11 us forward) against ru (rsq + unit: the
# fast IoSpec instance also assumes contiguous channels, so a row's per-channel addresses are immediate offsets;
# grad_rows' row loop 1293 -> 1189 static SASS instructions) and rue (ru + gate_grad's exp(A_log) formed once per CTA
# instead of per element). (1) the three builds' backward-quick figures at one seed with bf16 gradients (ru, rue: the
# same operations, so rsq's figures); rue's GPU tests, all of them, beside them (its new
# ChannelStridedGradientsMatchContiguous among them); (2) every backward kernel's time under ncu (one step) on rsq and
# rue; (3) the A/B at train-h64-fixed, 2 rounds; (4) grad_tc_kernel by line under ncu on rsq (the next input).
# Run as: OUT=$OUT bash .carry/lease/s37_l2.sh
#   carry [".carry/lease", ".carry/ab/rsq.tar.xz", ".carry/ab/ru.tar.xz", ".carry/ab/rue.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l2
lease_unpack rsq ru rue
lease_run tests rue 2 240 ./kda_gpu_tests & p1=$!
lease_same_figures "backward-quick --input-dtype-grads" rsq ru rue
wait $p1
grep -hE "^\[  (FAILED|PASSED) |tests? ran|ChannelStrided" "$W/tests.log" | head -20
lease_ncu_launches rsq train-h64-fixed "grad|products|reverse|finish|prepare|state"
lease_ncu_launches rue train-h64-fixed "grad|products|reverse|finish|prepare|state"
lease_ab rsq,ru,rue 330 train-h64-fixed
mkdir -p "$OUT/tc"
OUT=$OUT/tc timeout 100 bash scripts/gpu_ab.sh --builds rsq --impl cuda-generic --rounds 0 \
  --ncu grad_tc_kernel --ncu-count 1 --workload train-h64-fixed
echo "ncu grad_tc_kernel rc=$?"
lease_checks_done
