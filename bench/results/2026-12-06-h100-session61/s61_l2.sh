#!/usr/bin/env bash
# Session 61, call 2. Builds (scripts/gpu_build.sh --ab): s0cpk (eaea780, the kernels landed on main as d12886f);
# l2ef (84fa1d5 on d12886f): phase 1's workspace stores (Qg, Kd, A_qk planes, S5c's bulk copies) with L2's
# evict-first hint, the same bits by construction; l2efclk its measuring build (--stage-clocks).
# 1  full on s0cpk and l2ef at one seed (the same figures expected)
# 2  gpu_ab s0cpk / l2ef at h64-fixed and h96-fixed, 2 rounds, every run verified
# 3  stage clocks of l2efclk at h64-fixed (call 1 has s0cpkclk's)
# 4  ncu of both forward phases at h64-fixed on s0cpk and l2ef: DRAM bytes read / written, L2 traffic, duration
# Run as OUT=$OUT bash .carry/lease/s61_l2.sh with .carry/slim.sh on, carry [".carry/lease", ".carry/ab/s0cpk.tar.xz",
# ".carry/ab/s0cpk.COMMIT", ".carry/ab/l2ef.tar.xz", ".carry/ab/l2ef.COMMIT", ".carry/ab/l2efclk.tar.xz",
# .carry/ab/l2efclk.COMMIT"]; ~220 s.
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin s61_l2
lease_unpack s0cpk l2ef l2efclk
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lease_same_figures full s0cpk l2ef
lease_checks_done checks
lease_ab s0cpk,l2ef 200 h64-fixed h96-fixed
lease_clocks l2efclk h64-fixed
for b in s0cpk l2ef; do
  (cd "/tmp/ab/$b" && LD_LIBRARY_PATH=. timeout 60 ncu --clock-control none -k "regex:state_wgmma|prepare_kernel" \
    -c 2 --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,lts__t_sector_hit_rate.pct,gpu__time_duration.sum \
    ./kda-bench --workload h64-fixed --impl cuda-generic --no-verify --iters 1 --warmup 0 > "$OUT/ncu-bytes-$b.txt" 2>&1)
  echo "== ncu bytes $b"
  grep -E "_kernel|dram__|lts__|gpu__time" "$OUT/ncu-bytes-$b.txt" | sed 's/(const kda::ForwardParams.*//' | cut -c1-110
done
echo "done at $SECONDS s"
date -u
