#!/usr/bin/env bash
# Session 43, call 4: kda-verify backward-full whole on tcbase (7a5251f, the change that lands), which call 3 checked
# with the GPU tests and the benchmark's verified runs only.
# Run as: OUT=$OUT bash .carry/lease/s43_l4.sh        carry [".carry/lease", ".carry/ab"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l4
lease_unpack tcbase
lease_bwd_full tcbase
for n in bwdfull-a bwdfull-b bwdfull-c bwdfull-d; do lease_passed $n && echo "tcbase: $n passed" || echo "tcbase: $n FAILED"; done
grep -hE "^bwd_" "$W"/bwdfull-*.log | cut -c1-160
lease_checks_done
