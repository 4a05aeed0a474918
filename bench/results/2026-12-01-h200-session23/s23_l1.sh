#!/usr/bin/env bash
# Session 23, call 1: backward-full's near_identical_keys_beta_at_2 on each bisect build in .carry/bis (each
# bis-COMMIT: that commit's kda-verify, bench/results/2026-12-01-h200-session22/bisect_build.sh), at the two failing run
# seeds of session 22 and a fresh one, with --json. Run as: OUT=$OUT bash .carry/lease/s23_l1.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
builds=()
for f in .carry/${BIS:-bis}/bis-*.tar.xz; do
  b=$(basename "$f" .tar.xz); builds+=("$b")
  mkdir -p "/tmp/ab/$b" && tar -xJf "$f" -C "/tmp/ab/$b"
done
run_one() {
  local b=$1 s=$2 seed=(--seed $2)
  [ "$s" = fresh ] && seed=()
  (cd /tmp/ab/$b && LD_LIBRARY_PATH=. timeout 60 ./kda-verify --suite backward-full --impl cuda-generic \
    --filter near_identical_keys_beta_at_2 "${seed[@]}" --json "$OUT/$b-$s.json" > "$W/$b-$s.log" 2>&1
   echo "== $b $s: $(grep -E 'near_identical|seed' "$W/$b-$s.log" | tr '\n' ' ' | cut -c1-260)")
}
for b in "${builds[@]}"; do
  for s in 14329222173504304775 2902554903083653309 fresh; do run_one "$b" "$s"; done
done
(cd "$W" && tar -czf "$OUT/bisect.tgz" . && cd "$OUT" && tar -czf bisect-json.tgz *.json && rm -f *.json)
date -u
