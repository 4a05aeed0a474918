#!/usr/bin/env bash
# Session 21's sixth device call (~200 s, the session's last): profiles to plan the next steps, no new build. m21's
# kernels in one training step at train-h64-fixed (ncu SpeedOfLight + Occupancy: each kernel's duration, issue #9's
# breakdown), and the sm_90 decode kernel at decode-h32-b32 and -b256 with the full set and source (issue #7's 87%).
# Run as: OUT=$OUT bash .carry/lease/s21_l6.sh   with carry [".carry/lease", ".carry/ab/m21.tar.xz"].
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l6.log") 2>&1
date -u
source scripts/lease_lib.sh
lease_unpack m21
(cd /tmp/ab/m21 && LD_LIBRARY_PATH=. timeout 120 ncu --clock-control none --section SpeedOfLight --section Occupancy \
  --section LaunchStats -c 16 ./kda-bench --workload train-h64-fixed --impl cuda-generic --no-verify --iters 1 \
  --warmup 0 > "$OUT/ncu-train.txt" 2>&1; echo "ncu train rc=$?")
grep -E "^  [a-zA-Z_ :<>,0-9]*\(|Duration|Registers Per|Achieved Occ" "$OUT/ncu-train.txt" | cut -c1-120 | head -80
date -u
for b in 32 256; do
  mkdir -p "$OUT/dec$b"
  OUT=$OUT/dec$b timeout 90 bash scripts/gpu_ab.sh --builds m21 --impl cuda-generic --rounds 0 --ncu decode_bulk \
    --ncu-count 1 --workload decode-h32-b$b
  echo "ncu decode b$b rc=$?"; date -u
done
