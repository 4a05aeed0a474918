#!/usr/bin/env bash
# Session 35, call 3: tcstage (ad8357c: chunk_grad_tc.cu's staging with its L2 norms batched over 4 rows, rows past L
# without a branch, and only the CTA's own half of the gates converted where the bounded gate cannot be steep) and
# p3ty (d5bd169: tcstage plus chunk_products.cu's P3 as dA = -T^T (dU U0^T + dW W^T), no read-back of BV / BK)
# against main34 (a5b8502). backward-quick on all three at one seed (tcstage should give main34's figures to the
# digit, p3ty its own), p3ty's backward / stress GPU tests and backward-full, the A/B at train-h64-fixed, then the
# gradient launches of p3ty under ncu (durations).
# Run as: OUT=$OUT bash .carry/lease/s35_l3.sh
#   carry [".carry/lease", ".carry/ab/main34.tar.xz", ".carry/ab/tcstage.tar.xz", ".carry/ab/p3ty.tar.xz"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l3
lease_unpack main34 tcstage p3ty
lease_same_figures backward-quick main34 tcstage p3ty
for b in main34 p3ty; do echo "-- $b"; grep -hE "^bwd_" "$W/same-backward-quick-$b.log" | cut -c1-150; done
date -u
lease_bwd_checks p3ty
date -u
mkdir -p "$OUT/ab"
OUT=$OUT/ab timeout 330 bash scripts/gpu_ab.sh --builds main34,tcstage,p3ty --impl cuda-generic --rounds 2 \
  --workload train-h64-fixed
echo "gpu_ab rc=$?"; date -u
lease_ncu_launches p3ty train-h64-fixed 'products|grad'
cp "$W"/ncu-*.txt "$OUT/" 2>/dev/null
lease_checks_done
