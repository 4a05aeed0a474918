#!/usr/bin/env bash
# Prepared in session 44 (not run: no machine was lent for a third call) for a later session's first device call
# (~420 s + start): rv3 (b6ba863 on db087b6: the reverse passes' tile prefetch ranges formed once a CTA, dO'
# converted under one dtype switch, the previous chunk's record read at the top of the step; U and the decays of the
# state and reverse passes read with ld.shared, not generic loads) against main's code (the archive `both`, db087b6).
# Timing first, on an idle GPU: gpu_ab.sh both,rv3 at train-h64-fixed (forward and backward; every run verifies the
# gradients against the fp64 reference), two rounds, and ncu of rv3's first state / reverse launches; then the
# backward checks on rv3 (backward / stress GPU tests, backward-full whole). next_lease2.sh then checks the forward.
# Archives: .carry/ab/both.tar.xz (db087b6) and rv3.tar.xz (b6ba863), on this machine since session 44 (if gone:
# scripts/gpu_build.sh --python on main and on branch rv2 (or main + prepared/0001-*.patch), one at a time, each copied
# to .carry/ab/NAME.tar.xz with NAME.COMMIT once the build has finished; `xz -t` each).
# Run as: OUT=$OUT bash .carry/lease/next_lease.sh        carry [".carry/lease", ".carry/ab"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l1
lease_unpack both rv3
lease_ab both,rv3 200 train-h64-fixed
OUT=$OUT timeout 70 bash scripts/gpu_ab.sh --builds rv3 --rounds 0 --ncu-count 3 --ncu 'state_wgmma|reverse_wgmma' \
  --workload train-h64-fixed
echo "ncu rc=$?"
lease_bwd_checks rv3
lease_checks_done
