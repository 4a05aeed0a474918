#!/usr/bin/env bash
# Session 51, call 5: where h4-32k's forward spends its time (kda took 1.036x FLA's time there in call 4, the one
# workload measured where kda is slower): every kda launch of one kda-bench step under Nsight Compute's SpeedOfLight
# (lease_ncu_launches), h4-32k and h64-fixed for comparison, on aqk2 (main's kernels).
# Run as: OUT=$OUT bash .carry/lease/s51_l5.sh
# carry [".carry/lease", ".carry/ab/aqk2.tar.xz", ".carry/ab/aqk2.COMMIT"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s51_l5
lease_unpack aqk2
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lease_ncu_launches aqk2 h4-32k .
lease_ncu_launches aqk2 h64-fixed .
cp "$W"/ncu-launches-*.txt "$OUT/"
date -u
