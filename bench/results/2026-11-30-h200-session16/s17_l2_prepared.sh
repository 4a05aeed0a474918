#!/usr/bin/env bash
# Prepared in session 16 for session 17's second device call (~450 s), after s17_l1_prepared.sh:
#   1. ncu, full set with source, of the state pass on main and on statecl at h64-fixed (gpu_ab --ncu): the stall
#      reasons by SASS line (read here with scripts/ncu_stages.py --sass), the question session 16 left open (what
#      holds the state pass at 0.44 eligible warps a scheduler), answered for both forms.
#   2. kda (BUILD, default main; pass statecl if call 1 kept it) beside FLA on the six prefill workloads in one process
#      (issue #3 criterion 4), with Triton's cache sent back in <= 15 MiB parts (session 16's single file was over the
#      16 MiB limit) so later sessions can carry it and skip FLA's ~5 minutes of compiling: join them here with
#      `cat triton.tgz.part-* > .carry/triton.tgz` and carry ".carry/triton.tgz".
#   3. (before 2) ncu SpeedOfLight of each kernel of one train-h64-fixed step on BUILD: where the backward's 13.6 ms go.
# Run as: BUILD=main OUT=$OUT bash .carry/lease/s17_l2_prepared.sh   with carry [".carry/lease", ".carry/ab", ".whl"]
# (+ ".carry/triton.tgz" when it exists).
set -uo pipefail
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/l2.log") 2>&1
BUILD=${BUILD:-main}
date -u
OUT=$OUT timeout 200 bash scripts/gpu_ab.sh --builds main,statecl --impl cuda-generic --rounds 1 --ncu state_kernel \
  --ncu-count 1 --workload h64-fixed
echo "gpu_ab rc=$?"
date -u
mkdir -p /tmp/ab/$BUILD && tar -xJf .carry/ab/$BUILD.tar.xz -C /tmp/ab/$BUILD
# The training step's kernels, one each (issue #9: the last per-kernel profile of the backward is session 9's).
(cd /tmp/ab/$BUILD && LD_LIBRARY_PATH=. timeout 90 ncu --clock-control none --section SpeedOfLight \
  -k regex:'build_chunk_map|prepare_kernel|state_kernel|reverse_kernel|products_kernel|grad_kernel|finalize_qk|gate_params' \
  -c 14 ./kda-bench --workload train-h64-fixed --impl cuda-generic --no-verify --iters 1 --warmup 0 \
  > "$OUT/ncu-train-kernels.txt" 2>&1; echo "ncu train rc=$?")
grep -E "^  [a-z_ ]*(void|unnamed)|Duration" "$OUT/ncu-train-kernels.txt" | cut -c1-110
export TRITON_CACHE_DIR=/tmp/kda-triton-cache; mkdir -p $TRITON_CACHE_DIR
[ -f .carry/triton.tgz ] && tar -xzf .carry/triton.tgz -C /tmp
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
PYTHONUNBUFFERED=1 KDA_TORCH_LIBRARY=/tmp/ab/$BUILD/libkda_torch.so PYTHONPATH="/tmp/site:$PWD/python" timeout 330 \
  python3 scripts/bench_torch.py --part prefill --commit "$(cat .carry/ab/$BUILD.COMMIT)" --json "$OUT/peers_prefill.json" \
  > "$OUT/peers_prefill.log" 2>&1; echo "prefill rc=$?"
grep -h -E "median|WRONG|FAILED|Error| / |floor" "$OUT/peers_prefill.log" | head -40
date -u
(cd /tmp && timeout 40 tar -czf - kda-triton-cache | split -b 15M -d - "$OUT/triton.tgz.part-"); ls -la "$OUT"
date -u
