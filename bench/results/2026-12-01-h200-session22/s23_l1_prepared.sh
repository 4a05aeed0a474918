#!/usr/bin/env bash
# Prepared in session 22 for session 23's first device call (~120 s): bisect backward-full's near-identical keys at
# beta = 2, which main (m22b) fails (dv 1.7x its RMSE bound; session 8's 0fce9af passed it on seven seeds). Each
# archive bis-COMMIT holds that commit's kda-verify (built by session 22's /tmp/bis/build.sh: cmake Release, CUDA on,
# kda-verify only); m22b is main's kernels. Every build runs the case at the two failing run seeds and a fresh one,
# with --json (every gradient's figures). The CPU model (bench/results/2026-12-01-h200-session22/
# cpu_model_near_identical.sh, cpu_model_tile_rounding.py) puts the signature (dv alone ~6x past the plan, its worst
# element ~0.63 of its bound as on the H200) on A_qk at one TF32 pass. Two diagnostic builds on main (branches, not for
# main): bis-e745d19 (diagpw: every diagonal block pairwise fp32, none factored) and bis-2a0e674 (diagaqk3: S3's A_qk
# in 3xTF32 whatever kWide says). Whichever brings dv back to ~4e-4 names the stage; if neither, the bisect does.
# Bisect builds: 0fce9af (passed in session 8), c8be2aa, 8d8eec1, 5f9980a, 7bc5ffd, e5ba7d9, 1829c28, 2115ac2, feb64fa.
# Run as: OUT=$OUT bash .carry/lease/s23_l1.sh   with carry [".carry/lease", ".carry/ab/m22b.tar.xz", ".carry/bis"]
# (.carry/bis: eleven bis-COMMIT.tar.xz, ~37 MB; with m22b and the repository ~57 of the 64 MiB).
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l1
lease_unpack m22b
builds=(m22b)
for f in .carry/bis/bis-*.tar.xz; do
  b=$(basename "$f" .tar.xz); builds+=("$b")
  mkdir -p "/tmp/ab/$b" && tar -xJf "$f" -C "/tmp/ab/$b"
done
for b in "${builds[@]}"; do
  for s in 14329222173504304775 2902554903083653309 fresh; do
    seed=(--seed $s); [ $s = fresh ] && seed=()
    (cd /tmp/ab/$b && LD_LIBRARY_PATH=. timeout 60 ./kda-verify --suite backward-full --impl cuda-generic \
      --filter near_identical_keys_beta_at_2 "${seed[@]}" --json "$OUT/$b-$s.json" > "$W/$b-$s.log" 2>&1
     echo "== $b $s: $(grep -E 'near_identical' "$W/$b-$s.log" | cut -c1-150)")
  done
done
(cd "$W" && tar -czf "$OUT/bisect.tgz" . && cd "$OUT" && tar -czf bisect-json.tgz *.json && rm -f *.json)
date -u
