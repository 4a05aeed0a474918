#!/usr/bin/env bash
# Session 17, call 3 (~350 s): statepf (pf1, 26e8130) and statepf2 (pf2) against main (8118d2b).
# statepf: the state pass asks L2 (one bulk prefetch a CTA and chunk, its share of the tile) for the next chunk's
# whole tile when it issues group B; the reverse pass asks for the previous chunk's tiles (all but U) and dO rows at the
# top of each chunk. pf2: the same two chunks ahead. Why: ncu (call 2) put main's state pass at L2 hit 62%, DRAM 38%,
# 30% of stall samples at the cp.async issue (lg throttle) and the barrier behind it. Predicted: state pass -20 to
# -60 us at h64-fixed, more at h96 (two launches), train backward -50 to -150 us. Bit-identical by construction:
# the verifier lines must equal session 16's (l4/verify-full-l2pre.log with seed SF, l3/verify-bwdq.log with SB).
# Run as: OUT=$OUT bash .carry/lease/s17_l3.sh   with carry [".carry/lease", ".carry/ab"].
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l3.log") 2>&1
date -u
for b in pf1 pf2; do mkdir -p /tmp/ab/$b && tar -xJf .carry/ab/$b.tar.xz -C /tmp/ab/$b; done
W=$(mktemp -d)
run() {  # name build timeout cmd...
  local n=$1 b=$2 t=$3; shift 3
  ( cd /tmp/ab/$b && OMP_NUM_THREADS=3 LD_LIBRARY_PATH=. timeout "$t" "$@" > "$W/$n.log" 2>&1; echo "== $n rc=$? $(tail -n 1 "$W/$n.log")" )
}
SF=14035002217949444255 SB=15368221980386543344
pids=()
run verify-full-pf1 pf1 200 ./kda-verify --suite full --impl cuda-generic --seed $SF & pids+=($!)
run verify-bwdq-pf1 pf1 200 ./kda-verify --suite backward-quick --impl cuda-generic --seed $SB & pids+=($!)
run verify-bwdq-pf2 pf2 200 ./kda-verify --suite backward-quick --impl cuda-generic --seed $SB & pids+=($!)
wait "${pids[@]}"  # never a bare wait (the tee above)
(cd "$W" && tar -czf "$OUT/checks.tgz" .)
date -u
OUT=$OUT timeout 170 bash scripts/gpu_ab.sh --builds main,pf1,pf2 --impl cuda-generic --rounds 2 \
  --workload h64-fixed --workload h96-fixed --workload h64-mixed
echo "gpu_ab rc=$?"
date -u
OUT=$OUT timeout 120 bash scripts/gpu_ab.sh --builds main,pf1,pf2 --impl cuda-generic --rounds 1 --workload train-h64-fixed
echo "gpu_ab rc=$?"
date -u
