#!/usr/bin/env bash
# Prepared in session 21 for session 22's first device call (~470 s): three changes, each alone on main (97d49b7),
# checked and timed against m21 (743d672, main's kernels: main differs in docs only); their training steps and two
# backward changes are s22_l2_prepared.sh's, the merge beside FLA s22_l3_prepared.sh's.
# dred (branch dred, 581092d): the sm_90 decode kernel's consumers reduce their 8 rows by halving (9 shuffles, not 8
#   butterflies' 40; S k_hat's sums gathered back with 8 more) and read their tile's (n, hv, row0) from words the
#   producer stages (no 64-bit division a tile). ncu (session 21, H32 B256): consumers paced the kernel (update 18%,
#   output butterflies 17%, unit_of ~10% of the stall samples; full-barrier wait 10%). 102 registers (was 115).
#   Predicted: decode-h32-b256 -10..-25 us (294 -> ~275, 87% -> ~92% of the copy rate), b128 -5..-12, b32 -1..-4;
#   b1 unchanged (the row-split kernel); values not bit-identical (sum order).
# dred4 (branch dred4, 95f0cba, on dred): fp32 K = 128 at 3 stages and 4 CTAs an SM (16 consumer warps, not 12;
#   95 registers; a unit is 2 tiles). Predicted on dred: decode-h32-b256 -0..-20 us, b32 +-5 (units staged per
#   32 KB instead of 64 KB); bf16 and other K unchanged.
# wtma (branch wtma, 9b02c51): the prepare kernel's [W | U] staged as the state pass's TMA boxes (128-byte swizzle)
#   at K = 128 and stored by 8 TMA stores from one thread, not 192 row bulk copies (ncu session 21: that loop 8.8-10%
#   of the prepare kernel's stall samples). Predicted h64-fixed -30..-80 us, h96 -45..-120; train backward -20..-60
#   (the recompute's prepare); bit-identical (the same values to the same tile bytes: its verifier lines must equal
#   m21's but the timing).
# Run as: OUT=$OUT bash .carry/lease/s22_l1_prepared.sh   with carry [".carry/lease", ".carry/ab/m21.tar.xz",
# ".carry/ab/dred.tar.xz", ".carry/ab/dred4.tar.xz", ".carry/ab/wtma.tar.xz"].
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lease_lib.sh
lease_begin l1
lease_unpack m21 dred dred4 wtma
SF=14035002217949444255 SB=15368221980386543344
F='Wgmma*:Own/CudaHopper.*:Cases/CudaHopperBackward.*:CudaBehaviour.*:Backends/CudaBackwardDeterminism.*'
pids=()
lease_run verify-full-wtma wtma 4 240 ./kda-verify --suite full --impl cuda-generic --seed $SF & pids+=($!)
lease_run verify-bwdq-wtma wtma 2 200 ./kda-verify --suite backward-quick --impl cuda-generic --seed $SB & pids+=($!)
lease_run tests-wtma wtma 2 200 ./kda_gpu_tests --gtest_filter="$F" & pids+=($!)
lease_run verify-dec-dred dred 4 200 ./kda-verify --suite decode-full --impl cuda-generic & pids+=($!)
lease_run tests-dec-dred dred 2 200 ./kda_gpu_tests --gtest_filter='*Decode*' & pids+=($!)
lease_run verify-dec-dred4 dred4 2 200 ./kda-verify --suite decode-full --impl cuda-generic & pids+=($!)
lease_run tests-dec-dred4 dred4 1 200 ./kda_gpu_tests --gtest_filter='*Decode*' & pids+=($!)
wait "${pids[@]}"  # never a bare wait (the tee above)
lease_checks_done
dec=m21
for b in dred dred4; do
  lease_passed verify-dec-$b && grep -q "PASSED" "$W/tests-dec-$b.log" &&
    ! grep -q "FAILED" "$W/tests-dec-$b.log" && dec=$dec,$b
done
if [ "$dec" != m21 ]; then
  mkdir -p "$OUT/dec"
  OUT=$OUT/dec timeout 130 bash scripts/gpu_ab.sh --builds $dec --impl cuda-generic --rounds 2 \
    --workload decode-h32-b32 --workload decode-h32-b128 --workload decode-h32-b256 --workload decode-h12-b128 \
    --workload decode-h32-b32-bf16 --workload decode-h32-b1
  echo "gpu_ab decode rc=$?"; date -u
fi
if lease_passed verify-full-wtma && lease_passed verify-bwdq-wtma; then
  mkdir -p "$OUT/pre"
  OUT=$OUT/pre timeout 100 bash scripts/gpu_ab.sh --builds m21,wtma --impl cuda-generic --rounds 2 \
    --workload h64-fixed --workload h96-uniform --workload h64-mixed
  echo "gpu_ab prefill rc=$?"; date -u
fi
