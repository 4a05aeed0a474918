#!/usr/bin/env bash
# Prepared in session 26 for the next session's first device call (~470 s), not yet run. Builds (.carry/ab): main =
# session 26's main (its README names the commit), dpdl = main + both decode kernels (the sm_90 bulk one, and the
# row-split one where sm_90 code runs) launched with programmatic stream serialization (every global access after
# griddepcontrol.wait; the launch and ramp overlap the previous kernel's tail), prodcs = main + the products kernel's
# colsum(S0 . dS) at its end instead of ahead of P1's first barrier. Both keep main's bits: decode-full and
# backward-quick must print main's figures.
# Checks: decode-full main / dpdl and backward-quick main / prodcs at fresh seeds (lease_same_figures), dpdl's decode
# GPU tests (CudaDecodeGraph: two steps in one graph on one pool, also on main, where it first runs); then the A/Bs:
# decode (2 rounds) and train-h64-fixed (2 rounds).
# Run as: OUT=$OUT bash .carry/lease/s27_l1.sh   with carry [".carry/lease", ".carry/ab/main.tar.xz",
# ".carry/ab/dpdl.tar.xz", ".carry/ab/prodcs.tar.xz"]. The decode A/B: ~35 s a build and round at these six
# workloads (session 26's call 2: ~40 s at seven), so 2 builds x 2 rounds fit its 170 s limit.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l1
lease_unpack main dpdl prodcs
pids=()
lease_run tests-paths dpdl 2 280 ./kda_gpu_tests --gtest_filter='Cases/CudaDecodePaths.*' & pids+=($!)
lease_run tests-dec dpdl 2 280 ./kda_gpu_tests --gtest_filter='Cases/CudaDecode.*:*CudaFusedDecode*:*DecodeGraph*' &
pids+=($!)
lease_run tests-graph-main main 2 120 ./kda_gpu_tests --gtest_filter='*DecodeGraph*' & pids+=($!)
lease_same_figures decode-full main dpdl
wait "${pids[@]}"
grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W"/tests-*.log | head -20
lease_same_figures backward-quick main prodcs
lease_checks_done
mkdir -p "$OUT/dec" "$OUT/train"
OUT=$OUT/dec timeout 170 bash scripts/gpu_ab.sh --builds main,dpdl --impl cuda-generic --rounds 2 \
  --workload decode-h32-b1 --workload decode-h12-b32 --workload decode-h32-b32 --workload decode-h32-b256 \
  --workload decode-h12-b128 --workload decode-h32-b32-bf16
echo "gpu_ab dec rc=$?"; date -u
OUT=$OUT/train timeout 150 bash scripts/gpu_ab.sh --builds main,prodcs --impl cuda-generic --rounds 2 \
  --workload train-h64-fixed
echo "gpu_ab train rc=$?"; date -u
