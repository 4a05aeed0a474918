#!/usr/bin/env bash
# Prepared in session 62 for the next session's first call. Does a state pass in 32-token steps still hide under its
# bytes (docs/hopper.md, "Chunks of 32 tokens")? statex2 (branch statex2, a diagnostic never landed: main's kernels
# with each chunk's state-pass products run twice, the tile's copies once, its output stored once) against main63
# (d12886f, main's kernels) at h64-fixed:
# 1  ncu, every state_wgmma_kernel launch of one step of each (duration, DRAM bytes; session 61's metrics): main63's was
#    486.9 us at 83% of DRAM (session 61). Near it: the double pass hides, and 32-token chunks cost the state pass
#    little; near twice: its chain paces it, and the transposed kernel is the way.
# 2  kda-bench h64-fixed, 3 rounds interleaved, main63 verified, statex2 unverified (its figures are wrong by design).
# Run as OUT=$OUT bash .carry/lease/s63_l1.sh with .carry/slim.sh on, carry [".carry/lease", ".carry/ab/main63.tar.xz",
# ".carry/ab/main63.COMMIT", ".carry/ab/statex2.tar.xz", ".carry/ab/statex2.COMMIT"]; ~90 s.
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s63_l1
lease_unpack main63 statex2
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for b in main63 statex2; do
  (cd "/tmp/ab/$b" && LD_LIBRARY_PATH=. timeout 60 ncu --clock-control none -k "regex:state_wgmma" \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
    ./kda-bench --workload h64-fixed --impl cuda-generic --no-verify --iters 1 --warmup 0 > "$OUT/ncu-state-$b.txt" 2>&1)
  echo "== ncu $b rc=$?"
  grep -E "state_wgmma_kernel|gpu__time_duration|dram__" "$OUT/ncu-state-$b.txt" | cut -c1-110
done
for r in 1 2 3; do
  lease_run "bench-main63-$r" main63 4 60 ./kda-bench --workload h64-fixed --impl cuda-generic --iters 100
  lease_run "bench-statex2-$r" statex2 4 60 ./kda-bench --workload h64-fixed --impl cuda-generic --iters 100 --no-verify
done
lease_checks_done bench
echo "done at $SECONDS s"
date -u
