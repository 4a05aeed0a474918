#!/usr/bin/env bash
# s64_l3.sh's statediag part alone, for a call with little budget: the state pass's step timed in parts (ncu's
# duration of each state_wgmma launch of one h64-fixed step, KDA_STATE_DIAG = 0 all, 1 no loads after the first
# chunk, 2 no output products, 4 no chain products, 3 the chain's products and every sync with nothing loaded, 7 the
# syncs, splits and stores alone; the figures wrong, the times not). ~100 s.
# Run as OUT=$OUT bash .carry/lease/s64_l3_min.sh with .carry/slim.sh on, carry [".carry/lease",
# ".carry/ab/statediag.tar.xz", ".carry/ab/statediag.COMMIT"].
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s64_l3_min
lease_unpack statediag
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
for m in 0 1 2 4 3 7; do
  echo "-- KDA_STATE_DIAG=$m"
  KDA_STATE_DIAG=$m lease_ncu_launches statediag h64-fixed "state_wgmma"
  cp "$W/ncu-launches-statediag-h64-fixed.txt" "$W/ncu-diag-$m.txt"
done
(cd "$W" && tar -czf "$OUT/ncu-diag.tgz" ncu-diag-*.txt)
echo "done at $SECONDS s"
date -u
