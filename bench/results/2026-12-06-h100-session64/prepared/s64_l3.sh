#!/usr/bin/env bash
# Prepared in session 64 (two starts for it failed): where the state pass's ~3.1 us a 64-token step goes (call 1 of
# session 64: the masked halves pass took 3.13 us a step with a whole tile's products, so main's step is about as
# long in products and syncs as in bytes on an H100, and would be bound on them on an H200), and where phase 1's
# task goes now. gpu_ab.sh --ncu: Nsight Compute's full set with source on main63's first state_wgmma and
# prepare_kernel launches at h64-fixed (details page: stall reasons, tensor pipe, scheduler; the per-SASS CSV for
# scripts/ncu_stages.py, which splits the state pass at its two CTA barriers a chunk, phase A and phase B, and with
# --sass names the lines), then one verified kda-bench round; then the statediag build's state pass with parts of
# its step skipped, each timed by ncu (below). In what is left of LIMIT (default 420 s): h64-fixed and
# h96-fixed beside FLA on this card (bench_torch, 100 graph replays; the figures of record are the H200's).
# Run as OUT=$OUT bash .carry/lease/s64_l3.sh with .carry/slim.sh on, carry [".carry/lease", ".whl", ".carry/triton",
# ".carry/ab/main63.tar.xz", ".carry/ab/main63.COMMIT", ".carry/ab/statediag.tar.xz", ".carry/ab/statediag.COMMIT"];
# it returns s64_l3.log, results.tar, prefill.tgz and the Triton cache's parts (8 files at most).
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s64_l3
lease_unpack main63 statediag
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
OUT=$OUT timeout 240 bash scripts/gpu_ab.sh --builds main63 --impl cuda-generic --rounds 1 --workload h64-fixed \
  --ncu "state_wgmma|prepare_kernel" --ncu-count 2
echo "gpu_ab rc=$? at $SECONDS s"
# statediag (branch statediag, a diagnostic never for main: main63's kernels with parts of the state pass's step
# skipped at run time, KDA_STATE_DIAG): each launch's duration under ncu, one step of h64-fixed, the figures wrong.
# 0 all (= main63), 1 no loads after the first chunk, 2 no output products, 4 no chain products, 3 the chain's
# products and every sync with nothing loaded, 7 the syncs, splits and stores alone.
for m in 0 1 2 4 3 7; do
  echo "-- KDA_STATE_DIAG=$m"
  KDA_STATE_DIAG=$m lease_ncu_launches statediag h64-fixed "state_wgmma"
done
lim=${LIMIT:-420}
left=$((lim - SECONDS))
[ "$left" -gt 150 ] && lease_torch_prefill main63 "$left" h64-fixed h96-fixed
echo "done at $SECONDS s"
date -u
