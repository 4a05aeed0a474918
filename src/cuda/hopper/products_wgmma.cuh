// products_wgmma.cuh: P1 of the backward's products kernel (chunk_products.cu) on sm_90a wgmma, K = V = 128: the four
// products with inner dimension V, dM = lower(dO' V_new^T), KD = V_new dS, QS = dO' S0, dW = -dU S0, each bf16x3
// (lo hi, hi lo, hi hi; fp32 accumulation) as the mma.sync form, in two passes over V of 32-value slices:
//   pass V: slices of V_new [t][v] and dS_end [v][d]  -> dM (N = t': warpgroup w its 32 columns), KD (N = d: 64 each)
//   pass S: slices of -dU [t][v] and S0 [v][d]        -> QS, dW (N = d: 64 each)
// so each operand is read from global memory once here (the mma.sync form reads S0 and V_new twice), and dO' (staged by
// the kernel in LayO) is the A of dM and QS.
// Why: the mma.sync form issues 0.27 instructions a cycle a scheduler at 0.46 eligible warps (ncu, session 37), every
// warp ldmatrix-ing both planes of its A and B fragments each k-step; a wgmma reads each tile once per warpgroup.
// Budget: dO' planes 32 KB + a ring of two 24 KB slices = 80 KB of the kernel's 98 KB (two CTAs an SM kept);
// accumulators 64 floats a thread in pass S, 48 in pass V (the kernel's 128-register cap; with the slice loops unrolled
// the copies' addresses of every slice stayed live and ptxas spilled 340 bytes, rolled 4).
// Measured (session 38, train-h64-fixed): products kernel 1.64 -> 1.55 ms, backward 6479 -> 6403 us. The kernel stays
// near its DRAM floor (~0.9 ms for ~450 KB of unique bytes a task), so the gain is issue slots, not bytes. Session 39:
// the latency between phases (each a DRAM round trip with only the SM's other CTA to cover it): CS inside pass V
// (ProductsCs), pass V's first slice issued before dO' is staged and pass S's in pass V's last step: backward 6414 ->
// 6286 us (two A/Bs); P2 / P3's operands prefetched to L2 at P1's start made it slower (+20 us).
// The slices arrive by TMA (tma_map.h ProductsMaps: three boxes a slice, one thread issuing them, completing on the
// slot's mbarrier) instead of six 16-byte cp.async copies a thread: those copies' swizzled addresses were about half
// of P1's instructions, and P1 41% of the kernel's stall samples (ncu, session 39). Measured (session 40,
// train-h64-fixed): products kernel 1.38 -> 1.32 ms (ncu), backward 6249 -> 6189 us (two rounds).
// Needs CuTe (the nvidia-cutlass headers); device code runs on sm_90a only (the caller's #if).
#pragma once

#include <cute/arch/copy_sm90_desc.hpp>
#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/numeric_types.h>

#include "cuda/device_common.cuh"
#include "cuda/generic/chunk_common.cuh"
#include "cuda/hopper/state_wgmma.cuh"
#include "cuda/hopper/tma_map.h"

namespace kda::cuda::sm90 {

struct ProductsWgmma {
  using TB = cutlass::bfloat16_t;
  static constexpr int kC = 64, kK = 128, kV = 128, kSliceV = 32, kSlices = kV / kSliceV;
  // dO' [t][v] (M = t, K = v): K-major, 128-byte swizzle; the A of dM and QS, read a slice's two k-blocks at a time.
  using LayO = StateWgmmaTypes::LayK128;
  // A 32-value slice of V_new or -dU [t][v] (M or N = t, K = v): K-major, 64-byte swizzle (32 values: 64-byte rows).
  using LaySlice =
      decltype(cute::tile_to_shape(cute::GMMA::Layout_K_SW64_Atom<TB>{}, cute::Shape<cute::_64, cute::_32>{}));
  // Rows 32 w .. 32 w + 31 of a LaySlice (the B of dM for warpgroup w): the same layout kHalfOff w elements on.
  using LaySliceHalf =
      decltype(cute::tile_to_shape(cute::GMMA::Layout_K_SW64_Atom<TB>{}, cute::Shape<cute::_32, cute::_32>{}));
  // A 32-value slice of S0 or dS_end [v][d], one 64-key half (N = d - 64 h, K = v): MN-major, 128-byte swizzle.
  using LayState =
      decltype(cute::tile_to_shape(cute::GMMA::Layout_MN_SW128_Atom<TB>{}, cute::Shape<cute::_64, cute::_32>{}));
  using MmaKS = decltype(cute::make_tiled_mma(
      cute::SM90_64x64x16_F32BF16BF16_SS<cute::GMMA::Major::K, cute::GMMA::Major::MN>{}));  // KD, QS, dW
  using MmaM = decltype(cute::make_tiled_mma(
      cute::SM90_64x32x16_F32BF16BF16_SS<cute::GMMA::Major::K, cute::GMMA::Major::K>{}));  // dM
  // Elements: a slice plane (64 x 32 = 32 x 64), dO's plane; a ring slot holds A hi, A lo (one TMA box: [plane][t][v]),
  // then B's planes, half 0 hi, lo, half 1 hi, lo (a box a half: [plane][v][d]), each 1 KB aligned (the swizzles).
  static constexpr int kSlicePlane = kC * kSliceV, kOPlane = kC * kV, kSlot = 6 * kSlicePlane, kHalfOff = 32 * kSliceV;
  static constexpr size_t kOBytes = 2 * kOPlane * sizeof(TB), kRingBytes = 2 * kSlot * sizeof(TB);
  static constexpr uint32_t kSlotBytes = kSlot * sizeof(TB);  // a slice's TMA bytes
  // B's plane l (0 hi) of key half h in a slot.
  static __host__ __device__ constexpr int b_plane(int h, int l) { return 2 + 2 * h + l; }
};

// Element (r, c) of a plane that starts at base (1 KB aligned) in GMMA layout Lay, through a CuTe tensor: the layouts'
// swizzles act on the address bits of the smem pointer (16-byte units), which evaluating Lay{}(r, c) alone would not
// apply.
template <class Lay>
__host__ __device__ __forceinline__ __nv_bfloat16* plane_at(__nv_bfloat16* base, int r, int c) {
  auto t = cute::make_tensor(cute::make_smem_ptr(reinterpret_cast<ProductsWgmma::TB*>(base)), Lay{});
  return reinterpret_cast<__nv_bfloat16*>(cute::raw_pointer_cast(&t(r, c)));
}

// The slice of values v0 .. v0 + 31 of a task's operands (plane: the task's first plane, 2 task) into a ring slot,
// issued by one thread, completing kSlotBytes on the slot's mbarrier: A (V_new or -dU, map a: both planes in one box)
// and B (dS_end or S0, map b: a box a key half); hint_a, hint_b: the boxes' L2 policies (evict-first for an operand's
// last read in the kernel).
__device__ __forceinline__ void products_issue_slice(__nv_bfloat16* slot, uint64_t* bar, const CUtensorMap& a,
                                                     uint64_t hint_a, const CUtensorMap& b, uint64_t hint_b, int plane,
                                                     int v0) {
  using W = ProductsWgmma;
  cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(bar, W::kSlotBytes);
  cute::SM90_TMA_LOAD_3D::copy(&a, bar, hint_a, slot, v0, 0, plane);
  cute::SM90_TMA_LOAD_3D::copy(&b, bar, hint_b, slot + W::b_plane(0, 0) * W::kSlicePlane, 0, v0, plane);
  cute::SM90_TMA_LOAD_3D::copy(&b, bar, hint_b, slot + W::b_plane(1, 0) * W::kSlicePlane, 64, v0, plane);
}
constexpr uint64_t kEvictFirst = static_cast<uint64_t>(cute::TMA::CacheHintSm90::EVICT_FIRST);
constexpr uint64_t kEvictNormal = static_cast<uint64_t>(cute::TMA::CacheHintSm90::EVICT_NORMAL);

// Thread 0 sets up the ring's mbarriers (bars[2]: one arrival each, its own with a slice's bytes) and issues pass V's
// first slice (V_new, dS_end: values 0 .. 31) into slot 0, so that it lands while the kernel stages dO' (one DRAM
// latency of a CTA's start instead of two). The kernel's barrier after the staging precedes any wait on them.
__device__ __forceinline__ void products_p1_begin(unsigned char* ring, uint64_t* bars, const ProductsMaps& maps,
                                                  int plane) {
  if (threadIdx.x == 0) {
    cutlass::arch::ClusterTransactionBarrier::init(&bars[0], 1);
    cutlass::arch::ClusterTransactionBarrier::init(&bars[1], 1);
    cutlass::arch::fence_barrier_init();
    cutlass::arch::fence_view_async_shared();  // the inits, before this thread's copies complete on them
    products_issue_slice(reinterpret_cast<__nv_bfloat16*>(ring), &bars[0], maps.vnew, kEvictFirst, maps.dsend,
                         kEvictFirst, plane, 0);
  }
}

// CS = colsum(S0 . dS_end) inside pass V, while each slice's products run: thread tid takes the 8 keys d0 = 8 (tid %
// 16) .. d0 + 7 of the slice's values tid / 16 and tid / 16 + 16, dS_end from the slot (one 16-byte piece of each plane
// and value: LayState keeps 8 keys of a value whole) and S0 from global memory (its first read, default policy: pass S
// copies it again), loaded as the slice lands and used once its products are issued (loaded a slice ahead, its 16
// registers live across the products, ptxas spilled 164 bytes). Each factor is hi + lo (within 2^-16 relative of its
// fp32 value, as in the bf16x3 products). Why here: as a stage of its own before P1 (128 KB a task loaded and reduced
// with every warp waiting on it) it put a DRAM round trip in front of every task and read dS_end twice.
struct ProductsCs {
  static constexpr int kRows = 256 / 16;  // values a slice takes per thread pass: rows tid / 16, + 16
  // dS_end's pieces in a slot: value row i and plane l (0 hi) at piece() + i kRowStep + l kLoStep (LayState: 16 values
  // are 16 rows of 64 keys, two whole 1 KB swizzle atoms; a lo plane right after its hi plane; checked on the host in
  // tests/gpu/test_wgmma_layout.cu).
  static constexpr int kRowStep = kRows * 64, kLoStep = ProductsWgmma::kSlicePlane;
  uint4 s[2][2];  // S0 [value row][plane]
  float cs[8] = {};
  // Where thread tid's first dS_end piece (value row 0, hi plane) lies in a slot.
  __host__ __device__ static __nv_bfloat16* piece(__nv_bfloat16* slot, int tid) {
    using W = ProductsWgmma;
    const int d0 = 8 * (tid % 16);
    return plane_at<W::LayState>(slot + W::b_plane(d0 / 64, 0) * W::kSlicePlane, d0 % 64, tid / 16);
  }
  // Values v0 + tid / 16 (+ 16) of S0's plane pair (the address formed here: kept across the pass, ptxas spilled it).
  __device__ __forceinline__ void load(const __nv_bfloat16* S0, int v0) {
    using W = ProductsWgmma;
    int tid = static_cast<int>(threadIdx.x);
    asm volatile("" : "+r"(tid));
    const __nv_bfloat16* const p = S0 + (v0 + tid / 16) * W::kK + 8 * (tid % 16);
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int l = 0; l < 2; ++l) s[i][l] = chunk::ldg16(p + l * W::kK * W::kV + kRows * i * W::kK);
  }
  // The slice in slot sl (1 KB aligned, as every slot): the loaded S0 times its dS_end pieces (their address formed
  // here, as S0's: kept across the pass, ptxas spilled it).
  __device__ __forceinline__ void add(__nv_bfloat16* sl) {
    int tid = static_cast<int>(threadIdx.x);
    asm volatile("" : "+r"(tid));  // opaque: the address is not hoisted out of the pass's loop
    const __nv_bfloat16* const piece0 = piece(sl, tid);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float sh[8], sl8[8], dh[8], dl[8];
      chunk::cvt8(s[i][0], KDA_DTYPE_BFLOAT16, sh);
      chunk::cvt8(s[i][1], KDA_DTYPE_BFLOAT16, sl8);
      chunk::cvt8(*reinterpret_cast<const uint4*>(piece0 + kRowStep * i), KDA_DTYPE_BFLOAT16, dh);
      chunk::cvt8(*reinterpret_cast<const uint4*>(piece0 + kRowStep * i + kLoStep), KDA_DTYPE_BFLOAT16, dl);
#pragma unroll
      for (int j = 0; j < 8; ++j) cs[j] = fmaf(sh[j] + sl8[j], dh[j] + dl[j], cs[j]);
    }
  }
};

// The two passes. o: dO's planes (hi, lo kOPlane on) in LayO; ring, bars: two slots and their mbarriers, slot 0
// receiving pass V's first slice as products_p1_begin issued it; maps, plane: the task's saves (V_new, dS_end and S0
// copied evict-first, their last reads; -dU with the default policy, P2 reads it again); S0: its plane pair in global
// memory (ProductsCs's loads). epi_m(r, c, x, y) .. for each
// accumulator pair (r, c), (r, c + 1), after its pass; epi_w after the barrier that frees dO's planes (dW may be
// written over them). cs_part: 16 x 128 floats of shared memory free during P1, where pass V leaves CS's partial sums
// (ProductsCs); cs_out: CS [K], written by threads 0 .. 127 at the end, each key's 16 partials added in order (the
// caller's barrier after this call must precede any other use of cs_part's space). The first barrier (before any
// product) also publishes the caller's dO' stores to the async proxy.
template <class EpiM, class EpiK, class EpiQ, class EpiW>
__device__ __forceinline__ void products_p1(unsigned char* o, unsigned char* ring, uint64_t* bars,
                                            const ProductsMaps& maps, int plane, const __nv_bfloat16* S0,
                                            float* cs_part, float* cs_out, EpiM epi_m, EpiK epi_k, EpiQ epi_q,
                                            EpiW epi_w) {
  using namespace cute;
  using W = ProductsWgmma;
  using TB = W::TB;
  using LayB = W::LayState;
  const int tid = static_cast<int>(threadIdx.x), wtid = tid % 128, wg = tid / 128;
  __nv_bfloat16* const slots = reinterpret_cast<__nv_bfloat16*>(ring);
  auto view = [](void* p, auto lay) { return make_tensor(make_smem_ptr(reinterpret_cast<TB*>(p)), lay); };
  TB* const ob = reinterpret_cast<TB*>(o);
  W::MmaKS mma_ks;
  W::MmaM mma_m;
  mma_ks.accumulate_ = GMMA::ScaleOut::One;
  mma_m.accumulate_ = GMMA::ScaleOut::One;
  auto thr_ks = mma_ks.get_thread_slice(wtid);
  auto thr_m = mma_m.get_thread_slice(wtid);
  Tensor fOh = thr_m.make_fragment_A(thr_m.partition_A(view(ob, W::LayO{})));
  Tensor fOl = thr_m.make_fragment_A(thr_m.partition_A(view(ob + W::kOPlane, W::LayO{})));
  Tensor gOh = thr_ks.make_fragment_A(thr_ks.partition_A(view(ob, W::LayO{})));
  Tensor gOl = thr_ks.make_fragment_A(thr_ks.partition_A(view(ob + W::kOPlane, W::LayO{})));
  // Slice g (pass V's 0 .. 3, then pass S's 4 .. 7; slot g % 2, its mbarrier's (g / 2)-th completion) landed; then
  // the barrier: every warpgroup past slice g - 1's products and reads, so thread 0 may refill that slot with slice
  // g + 1. The fence publishes this thread's shared stores (the caller's dO') to the async proxy before the barrier.
  auto land = [&](int g) {
    cutlass::arch::ClusterTransactionBarrier::wait(&bars[g & 1], static_cast<uint32_t>((g >> 1) & 1));
    cutlass::arch::fence_view_async_shared();
    __syncthreads();
  };
  auto issue = [&](int g, const CUtensorMap& a, uint64_t hint_a, const CUtensorMap& b, int v0) {
    if (tid == 0) products_issue_slice(slots + (g & 1) * W::kSlot, &bars[g & 1], a, hint_a, b, kEvictFirst, plane, v0);
  };
  // Each accumulator pair of a [64][N] tile: (row, column) from CuTe's own partition of the identity.
  auto for_pairs = [&](auto& thr, auto& acc, auto shape, int col0, auto epi) {
    Tensor cC = thr.partition_C(make_identity_tensor(shape));
    CUTE_UNROLL
    for (int i = 0; i < size(acc); i += 2) epi(get<0>(cC(i)), col0 + get<1>(cC(i)), acc(i), acc(i + 1));
  };

  // ---- pass V: dM (this warpgroup's 32 columns t'), KD (its 64 keys).
  {
    Tensor accM = partition_fragment_C(mma_m, Shape<_64, _32>{});
    Tensor accK = partition_fragment_C(mma_ks, Shape<_64, _64>{});
    clear(accM);
    clear(accK);
    ProductsCs cs;
#pragma unroll 1
    for (int s = 0; s < W::kSlices; ++s) {
      land(s);
      cs.load(S0, W::kSliceV * s);
      if (s + 1 < W::kSlices)
        issue(s + 1, maps.vnew, kEvictFirst, maps.dsend, W::kSliceV * (s + 1));
      else  // pass S's first slice into slot 0 (slice 2's, free: every warpgroup is past its products), landing while
            // this pass's epilogue stores
        issue(W::kSlices, maps.du, kEvictNormal, maps.starts, 0);
      TB* const sl = reinterpret_cast<TB*>(slots + (s & 1) * W::kSlot);
      Tensor aVh = thr_ks.make_fragment_A(thr_ks.partition_A(view(sl, W::LaySlice{})));
      Tensor aVl = thr_ks.make_fragment_A(thr_ks.partition_A(view(sl + W::kSlicePlane, W::LaySlice{})));
      Tensor bVh = thr_m.make_fragment_B(thr_m.partition_B(view(sl + W::kHalfOff * wg, W::LaySliceHalf{})));
      Tensor bVl =
          thr_m.make_fragment_B(thr_m.partition_B(view(sl + W::kSlicePlane + W::kHalfOff * wg, W::LaySliceHalf{})));
      Tensor bDh = thr_ks.make_fragment_B(thr_ks.partition_B(view(sl + W::b_plane(wg, 0) * W::kSlicePlane, LayB{})));
      Tensor bDl = thr_ks.make_fragment_B(thr_ks.partition_B(view(sl + W::b_plane(wg, 1) * W::kSlicePlane, LayB{})));
      warpgroup_fence_operand(accM);
      warpgroup_fence_operand(accK);
      warpgroup_arrive();
      CUTE_UNROLL
      for (int j = 0; j < 2; ++j) {
        const int kb = 2 * s + j;  // dO's k-block
        gemm(mma_m, fOl(_, _, kb), bVh(_, _, j), accM);
        gemm(mma_m, fOh(_, _, kb), bVl(_, _, j), accM);
        gemm(mma_m, fOh(_, _, kb), bVh(_, _, j), accM);
        gemm(mma_ks, aVl(_, _, j), bDh(_, _, j), accK);
        gemm(mma_ks, aVh(_, _, j), bDl(_, _, j), accK);
        gemm(mma_ks, aVh(_, _, j), bDh(_, _, j), accK);
      }
      warpgroup_commit_batch();
      cs.add(reinterpret_cast<__nv_bfloat16*>(sl));  // beside the products (both only read the slot)
      warpgroup_wait<0>();
      warpgroup_fence_operand(accM);
      warpgroup_fence_operand(accK);
    }
    for_pairs(thr_m, accM, Shape<_64, _32>{}, 32 * wg, epi_m);
    for_pairs(thr_ks, accK, Shape<_64, _64>{}, 64 * wg, epi_k);
    float4* const dst = reinterpret_cast<float4*>(cs_part + (tid / 16) * W::kK + 8 * (tid % 16));
    dst[0] = make_float4(cs.cs[0], cs.cs[1], cs.cs[2], cs.cs[3]);
    dst[1] = make_float4(cs.cs[4], cs.cs[5], cs.cs[6], cs.cs[7]);
  }

  // ---- pass S: QS and dW (this warpgroup's 64 keys); its first slice was issued in pass V's last step.
  {
    Tensor accQ = partition_fragment_C(mma_ks, Shape<_64, _64>{});
    Tensor accW = partition_fragment_C(mma_ks, Shape<_64, _64>{});
    clear(accQ);
    clear(accW);
#pragma unroll 1
    for (int s = 0; s < W::kSlices; ++s) {
      land(W::kSlices + s);
      if (s + 1 < W::kSlices) issue(W::kSlices + s + 1, maps.du, kEvictNormal, maps.starts, W::kSliceV * (s + 1));
      TB* const sl = reinterpret_cast<TB*>(slots + (s & 1) * W::kSlot);
      Tensor aUh = thr_ks.make_fragment_A(thr_ks.partition_A(view(sl, W::LaySlice{})));
      Tensor aUl = thr_ks.make_fragment_A(thr_ks.partition_A(view(sl + W::kSlicePlane, W::LaySlice{})));
      Tensor bSh = thr_ks.make_fragment_B(thr_ks.partition_B(view(sl + W::b_plane(wg, 0) * W::kSlicePlane, LayB{})));
      Tensor bSl = thr_ks.make_fragment_B(thr_ks.partition_B(view(sl + W::b_plane(wg, 1) * W::kSlicePlane, LayB{})));
      warpgroup_fence_operand(accQ);
      warpgroup_fence_operand(accW);
      warpgroup_arrive();
      CUTE_UNROLL
      for (int j = 0; j < 2; ++j) {
        const int kb = 2 * s + j;
        gemm(mma_ks, gOl(_, _, kb), bSh(_, _, j), accQ);
        gemm(mma_ks, gOh(_, _, kb), bSl(_, _, j), accQ);
        gemm(mma_ks, gOh(_, _, kb), bSh(_, _, j), accQ);
        gemm(mma_ks, aUl(_, _, j), bSh(_, _, j), accW);
        gemm(mma_ks, aUh(_, _, j), bSl(_, _, j), accW);
        gemm(mma_ks, aUh(_, _, j), bSh(_, _, j), accW);
      }
      warpgroup_commit_batch();
      warpgroup_wait<0>();
      warpgroup_fence_operand(accQ);
      warpgroup_fence_operand(accW);
    }
    for_pairs(thr_ks, accQ, Shape<_64, _64>{}, 64 * wg, epi_q);
    __syncthreads();  // every warpgroup's reads of dO's planes done: dW may overwrite them
    for_pairs(thr_ks, accW, Shape<_64, _64>{}, 64 * wg, epi_w);
  }
  if (tid < W::kK) {  // CS: pass V's partials, stored before pass S's barriers
    float c = 0.0f;
#pragma unroll
    for (int r = 0; r < ProductsCs::kRows; ++r) c += cs_part[r * W::kK + tid];
    cs_out[tid] = c;
  }
}

}  // namespace kda::cuda::sm90
