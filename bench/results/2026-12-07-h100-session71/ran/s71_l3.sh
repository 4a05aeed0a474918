#!/usr/bin/env bash
# Session 71's second call: dsmx (fdaeb9d: grad_tc's K = 128 halves exchange partial dots by one bulk copy on the
# partner's mbarrier) before it lands: backward-full on it (it kept backward-quick's figures at one seed in s71_l2),
# then gpu_ab main71,dsmx: two rounds at train-h64-fixed (s71_l2's one round: backward 5616.0 against 5639.1 us), one at
# train-h96-fixed (its grad_tc is the standalone kernel there: a partial reverse wave).
# Run as OUT=$OUT bash .carry/lease/s71_l3.sh, timeout_s 600, carry [".carry/lease", ".carry/ab"].
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s71_l3
lease_unpack main71 dsmx
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lim=${LIMIT:-540}
lease_bwd_full dsmx & p1=$!
wait $p1
for r in a b c d; do echo "backward-full $r: $(grep -hE 'kda-verify: [0-9]+ passed' "$W/bwdfull-$r.log" | tail -1)"; done
grep -hE "FAIL" "$W"/bwdfull-*.log | head -5
lease_checks_done checks
echo "checks done at $SECONDS s"
ab() {  # BUILDS LIMIT ROUNDS WORKLOAD DIR
  mkdir -p "$OUT/$5"
  OUT=$OUT/$5 timeout "$2" bash scripts/gpu_ab.sh --builds "$1" --impl cuda-generic --rounds "$3" --workload "$4"
  echo "gpu_ab $4 rc=$?"
}
left=$((lim - SECONDS - 140))
[ "$left" -gt 260 ] && left=260
[ "$left" -gt 60 ] && ab main71,dsmx "$left" 2 train-h64-fixed ab-h64
left=$((lim - SECONDS))
[ "$left" -gt 80 ] && ab main71,dsmx "$left" 1 train-h96-fixed ab-h96
(cd "$W" && tar -czf "$OUT/final.tgz" .)
echo "done at $SECONDS s"
date -u
