#!/usr/bin/env bash
# Prepared in session 51: 554d05d (on branch segwg; prepared/0002-*.patch) moves the decode norm kernel's gate loads ahead of its
# reduction (bit-identical). Issue #7 criterion 4's fusions beside FLA on main52 and segwg, one process each
# (bench_torch --part fusions --impl kda --impl fla: "fused" and "norm-fused-fla" carry the change; session 51: the
# norm fusion alone cost +1.1..+6.1 us against FLA's rms_norm_gated), two rounds interleaved. ~300 s + start (FLA's
# conv / norm compile ~60 s on a fresh machine).
# Run as: OUT=$OUT bash .carry/lease/s52_l2.sh
# carry [".carry/lease", ".carry/ab/main52.tar.xz", ".carry/ab/segwg.tar.xz", ".whl", ".carry/ab/main52.COMMIT", ".carry/ab/segwg.COMMIT"]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s52_l2
lease_unpack main52 segwg
lease_triton_cache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
round=0
for b in main52 segwg main52 segwg; do
  round=$((round + 1))
  f="$OUT/fusions-$round-$b"
  LD_LIBRARY_PATH=/tmp/ab/$b KDA_TORCH_LIBRARY=/tmp/ab/$b/libkda_torch.so PYTHONPATH="/tmp/site:$PWD/python" \
    timeout 120 python3 scripts/bench_torch.py --part fusions --impl kda --impl fla --iters 50 \
    --commit "$(cut -c1-7 .carry/ab/$b.COMMIT)" --json "$f.json" > "$f.log" 2>&1
  echo "== fusions $b rc=$?"
  grep -hE "^fusions|^  (fused|norm-fused-fla|unfused-fla|conv-fused-fla) " "$f.log"
done
date -u
