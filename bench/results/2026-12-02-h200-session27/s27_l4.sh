#!/usr/bin/env bash
# Session 27, call 4 (~150 s): where call 3's products gain went. Every launch of the backward's passes of one
# train-h64-fixed step under Nsight Compute (SpeedOfLight: duration), on prodpl (main's kernels) and planes: the
# recompute's state pass, the reverse pass and the products, to see which writer of the planes got slower.
# Run as: OUT=$OUT bash .carry/lease/s27_l4.sh   with carry [".carry/lease", ".carry/ab/prodpl.tar.xz",
# ".carry/ab/planes.tar.xz"].
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l4
lease_unpack prodpl planes
for b in prodpl planes; do
  (cd "/tmp/ab/$b" && LD_LIBRARY_PATH=. timeout 100 ncu --clock-control none \
    -k 'regex:state_wgmma|reverse_wgmma|products_kernel|prepare|grad' --section SpeedOfLight ./kda-bench \
    --workload train-h64-fixed --impl cuda-generic --no-verify --iters 1 --warmup 0 > "$OUT/ncu-$b.txt" 2>&1)
  echo "== $b"
  grep -E "^  [a-z_].*\(|Duration" "$OUT/ncu-$b.txt" | sed -E 's/\(int, int, int\)//' | cut -c1-110 | paste - - | \
    awk '{print}' | head -40
done
date -u
