#!/usr/bin/env bash
# Session 42, call 4: two grad_tc staging changes on main (tcepi's archive = the tree of 60a90b0) built from call 3's
# profile (line 144, the first use of the loaded gate, 10% of grad_tc's samples at long scoreboard 95%):
#   rb8  = b1549e7: a warp's 8 rows' loads issued at once instead of 4 and 4;
#   rows = d1c6007: rb8 + the rows' loads issued ahead of dM / dA's cp.async copies and the L2 prefetches.
# gpu_ab.sh tcepi,rb8,rows at train-h64-fixed (two rounds), then the backward checks (backward / stress GPU tests,
# backward-full) on whichever of rb8 / rows had the lower mean backward median.
# Run as: OUT=$OUT bash .carry/lease/s42_l4.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l4
lease_unpack tcepi rb8 rows
lease_ab tcepi,rb8,rows 300 train-h64-fixed | tee "$W/ab.txt"
best=$(awk '/^== [a-z0-9]+ round/ { b = $2 } /backward median/ { for (i = 1; i <= NF; ++i) if ($i == "median") { s[b] += $(i + 1); n[b]++ } }
  END { best = ""; for (x in s) if (x != "tcepi" && (best == "" || s[x] / n[x] < s[best] / n[best])) best = x; print best }' "$W/ab.txt")
echo "checks on: ${best:-rows}"
lease_bwd_checks "${best:-rows}"
lease_checks_done
