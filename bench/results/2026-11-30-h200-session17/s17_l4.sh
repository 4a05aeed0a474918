#!/usr/bin/env bash
# Session 17, call 4 (~380 s): revpf (53e368c: the L2 prefetch in the reverse pass only) against main (8118d2b) and
# pf1 (26e8130: the forward state pass too). Call 3 measured pf1's forward unchanged at h64-fixed and 15-25 us slower
# at h96-fixed, its train-h64-fixed backward 13555 -> 13214 us. Predicted: revpf's forward = main's, its backward
# = pf1's within ~50 us. Then ncu SpeedOfLight of every kernel of one train-h64-fixed step on revpf (issue #9: the
# last per-kernel profile of the backward is session 9's).
# Run as: OUT=$OUT bash .carry/lease/s17_l4.sh   with carry [".carry/lease", ".carry/ab"].
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l4.log") 2>&1
date -u
mkdir -p /tmp/ab/revpf && tar -xJf .carry/ab/revpf.tar.xz -C /tmp/ab/revpf
SB=15368221980386543344
(cd /tmp/ab/revpf && LD_LIBRARY_PATH=. timeout 150 ./kda-verify --suite backward-quick --impl cuda-generic --seed $SB \
  > "$OUT/verify-bwdq-revpf.log" 2>&1; echo "verify rc=$? $(tail -n 1 "$OUT/verify-bwdq-revpf.log")")
date -u
OUT=$OUT timeout 100 bash scripts/gpu_ab.sh --builds main,pf1,revpf --impl cuda-generic --rounds 2 --workload h96-fixed
echo "gpu_ab rc=$?"
date -u
OUT=$OUT timeout 110 bash scripts/gpu_ab.sh --builds main,pf1,revpf --impl cuda-generic --rounds 1 --workload train-h64-fixed
echo "gpu_ab rc=$?"
date -u
(cd /tmp/ab/revpf && LD_LIBRARY_PATH=. timeout 80 ncu --clock-control none --section SpeedOfLight \
  -k regex:'build_chunk_map|prepare_kernel|state_kernel|reverse_kernel|products_kernel|grad_kernel|finalize|gate' \
  -c 16 ./kda-bench --workload train-h64-fixed --impl cuda-generic --no-verify --iters 1 --warmup 0 \
  > "$OUT/ncu-train-kernels.txt" 2>&1; echo "ncu train rc=$?")
grep -E "^  [a-zA-Z_ ]*(void|unnamed|kda)|Duration" "$OUT/ncu-train-kernels.txt" | cut -c1-110
date -u
