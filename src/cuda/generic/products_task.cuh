// products_task.cuh: one task of the chunked backward's products (docs/backward.md; launch 4 of backward_chunked.cu):
// per (chunk, value head), the matrix products of the gradient pass, from the saved forward quantities (BackwardLayout:
// T, S0, V_new; phase 1's U0 and W tiles) and the reverse pass's dU and chunk-end dS (T, S0, V_new, -dU, dS and W as
// bf16 hi / lo planes), into the task's product tiles (ProdLayout) that the per-channel pass (chunk_grad.cu) reads:
//   P1  dM = lower(dO' V_new^T), QS = dO' S0, KD = V_new dS, dW = -dU S0      (dO' = scale dO; inner dimension V)
//   P2  BV = T^T dU, BK = T^T dW                                            (inner dimension C)
//   P3  dA = -strictly_lower(BV U0^T + BK W^T)                              (inner dimension V, then K)
//   CS  colsum(S0 . dS): the coefficient of the whole chunk's decay in dg
// Why a kernel of its own: inside the per-channel pass these products ran at one 8-warp CTA per SM (that pass's 210 KB
// of shared memory), where their operand loads were exposed; here a CTA needs ~100 KB and 128 registers per thread,
// so two CTAs share an SM and hide each other's loads. The products run on tensor cores in bf16x3 (block_gemm below;
// P1 on wgmma on the Hopper path at K = V = 128, hopper/products_wgmma.cuh: products 1.64 -> 1.55 ms at
// train-h64-fixed, session 38; 1.49-1.51 with CS formed inside it, session 39).
//
// A task a CTA of 256 threads, per (chunk list entry, value head); entries past the list's length return at once.
// Shared memory: the GEMM staging (a 16-step k-slice of A and B as bf16 hi / lo planes, padded), dW as planes [C][K]
// (P2's operand), which first holds dO' as planes [C][V] (P1's), and the operand rings (4 k-slices of A and of B, fp32
// or planes): 100,352 bytes at K = V = 128, two CTAs per SM (by registers and shared memory).
//
// products_kernel (chunk_products.cu) runs a task a CTA; the gradient pipe (chunk_grad_pipe.cu) runs them as tickets
// beside the stage that reads their tiles.
#pragma once

#include <climits>
#include <cstdint>

#include "cuda/device_common.cuh"
#include "cuda/generic/chunk_common.cuh"
#include "cuda/generic/chunk_kernels.h"
#include "cuda/generic/chunk_map.h"
#include "cuda/generic/mma_layout.h"
#include "cuda/hopper/tma_map.h"

#if defined(KDA_HAS_CUTE)
#include "cuda/hopper/products_wgmma.cuh"
#endif
// Whether this compilation pass can build the wgmma P1 (hopper/products_wgmma.cuh): sm_90a with CuTe. The kHopper
// instance takes it there; every other instance and pass runs P1 on mma.sync.
#if defined(KDA_HAS_CUTE) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define KDA_PRODUCTS_WGMMA 1
#else
#define KDA_PRODUCTS_WGMMA 0
#endif

namespace kda::cuda::chunk::products {

constexpr int kThreads = 256;
constexpr int kC = kChunk;

// Staging of one k-slice: A [64][kKS] and B [N][kKS] (both k-contiguous), each as a hi and a lo bf16 plane of row
// pitch kPitch = kKS + 8 elements (80 bytes: the 8 rows an ldmatrix reads start in 8 different 16-byte bank groups).
constexpr int kKS = 16, kPitch = kKS + 8;
// The operands in global memory reach shared memory through a ring of kDepth k-slices per operand (cp.async, 16 bytes
// a copy), kDepth - 1 slices ahead of the one being split. Why: with each slice's operands loaded into registers one
// slice ahead (session 7-25's form), every slice waited a global round trip for ~24 mma a warp, and the barriers made
// all 8 warps wait for the slowest load (ncu, session 22: the GEMM lines held 78% of the kernel's stall samples,
// long-scoreboard and barrier their main reasons). A slot holds [64][kKS] fp32 for A, [N][kKS] (or [kKS][N]) for B
// (mma_layout.h ring_copy / ring_at); 48 KB for the two rings.
constexpr int kDepth = 4;
constexpr int kSlotA = kC * kKS, kSlotB = 128 * kKS;  // floats (B: N <= 128)

template <int K, int V>
struct ProdSmem {  // float offsets into shared memory
  static constexpr int W = K > V ? K : V;
  static_assert(W <= 128, "products: the B ring's slot holds N <= 128 columns");
  // A and B staging: two bf16 planes of [rows][kPitch] each (kPitch / 2 floats per row and plane).
  static constexpr int kAs = 0, kBs = kAs + kC * kPitch, kDW = kBs + W * kPitch;
  // dO' as bf16 planes [C][V] shares dW's space, planes [C][K] (dO' is read by P1's first two products, dW written
  // after the fourth); a plane pair takes the floats of the fp32 matrix.
  static constexpr int kTail = K > V ? K : V;
  static constexpr int kRingA = kDW + kC * kTail, kRingB = kRingA + kDepth * kSlotA;
  static constexpr int kBar = kRingB + kDepth * kSlotB;  // the wgmma P1's two mbarriers (its slice ring's)
  static constexpr size_t kBytes = sizeof(float) * kBar + 2 * sizeof(uint64_t);
#if defined(KDA_HAS_CUTE)
  // The wgmma P1 (K = V = 128): dO's planes in LayO over dW's space, its slice ring over the operand rings; both 1 KB
  // aligned for the swizzles.
  static_assert(K != 128 || V != 128 ||
                    (kDW * 4 % 1024 == 0 && kRingA * 4 % 1024 == 0 &&
                     sm90::ProductsWgmma::kOBytes <= 4 * size_t{kRingA - kDW} &&
                     sm90::ProductsWgmma::kRingBytes <= 4 * size_t{kBar - kRingA}),
                "products: the wgmma P1's planes and ring fit the mma.sync layout's regions");
#endif
};

// block_gemm's operands: element (i, k) of an [n][kin] operand (i: A's row or B's column), n = 64 for A, N for B.
// kKC: the source is contiguous in k (element (i, k) at i * ld + k), else in i (at k * ld + i). Two kinds:
// - fp32 (kPlanes false): issue() copies slice [k0, k0 + kKS) into a ring slot (every thread of the CTA takes part),
//   at() reads element (i, k0 + kk) from it, and block_gemm splits the slice into its staging planes (the staging reads
//   consecutive source elements in consecutive threads either way: mma_layout.h slice_pair).
// - bf16 hi / lo planes (kPlanes true): the element is hi + lo, already split; ldmatrix reads them where they lie
//   (a ring slot or shared memory): hi(slot) is the hi plane, the lo plane kPlane elements after it, and off(i, k0, kk)
//   the element's offset in a plane. Nothing to stage: a GEMM whose two operands are planes skips the split and its
//   barrier.
// fp32 in global memory.
template <int n, bool KC>
struct GlobalF32 {
  static constexpr bool kKC = KC, kPlanes = false;
  const float* p;
  int ld;
  uint64_t policy;  // the copies' L2 cache policy (evict_first() at the operand's last read), 0: the default
  __device__ __forceinline__ void issue(float* slot, int k0) const {
    constexpr int kChunks = n * kKS / 4, kPer = kChunks / kThreads;  // 16-byte copies, per thread
    static_assert(kPer * kThreads == kChunks, "products ring: copies must tile the CTA");
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int c = static_cast<int>(threadIdx.x) + j * kThreads;
      const RingCopy rc = ring_copy(c, n, kKS, KC);
      cp_async16(slot + rc.dst, KC ? p + rc.i * ld + k0 + rc.k : p + (k0 + rc.k) * ld + rc.i, policy);
    }
  }
  __device__ __forceinline__ float at(const float* slot, int i, int kk) const {
    return slot[ring_at(i, kk, n, kKS, KC)];
  }
};
// bf16 hi / lo planes in global memory (hi at p, lo at p + plane; W as phase 1 split it), copied into a ring slot laid
// out for ldmatrix (mma_layout.h plane_copy / plane_slot_at).
template <int n, bool KC>
struct GlobalPlanes {
  static constexpr bool kKC = KC, kPlanes = true;
  static constexpr int kPlane = n * kKS;  // in the slot
  static_assert(2 * kPlane * sizeof(__nv_bfloat16) == n * kKS * sizeof(float),
                "products ring: both planes of a slice take the slot of the fp32 slice");
  const __nv_bfloat16* p;
  int ld;
  int64_t plane;
  uint64_t policy;  // as GlobalF32's
  __device__ __forceinline__ void issue(float* slot, int k0) const {
    constexpr int kCopies = 4 * n, kPer = kCopies / kThreads;  // 16-byte copies of 8 bf16, both planes
    static_assert(kPer * kThreads == kCopies, "products ring: plane copies must tile the CTA");
    __nv_bfloat16* const s = reinterpret_cast<__nv_bfloat16*>(slot);
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const PlaneCopy pc = plane_copy(static_cast<int>(threadIdx.x) + j * kThreads, n, KC);
      const int64_t src = pc.pl * plane + (KC ? int64_t{pc.i} * ld + k0 + pc.kk : int64_t{k0 + pc.kk} * ld + pc.i);
      cp_async16(s + pc.pl * kPlane + plane_slot_at(pc.i, pc.kk, n, KC), p + src, policy);
    }
  }
  __device__ __forceinline__ const __nv_bfloat16* hi(const float* slot) const {
    return reinterpret_cast<const __nv_bfloat16*>(slot);
  }
  __device__ __forceinline__ int off(int i, int, int kk) const { return plane_slot_at(i, kk, n, KC); }
};
// bf16 hi / lo planes already in shared memory (dO', dW: split once where this kernel forms them), each an unpadded
// [rows][cols] plane swizzled by row (mma_layout.h swizzled(); cols a multiple of 64, so the 8 rows of any ldmatrix
// matrix sit in 8 different bank groups): element (i, k) at row i, column k if KC, else at row k, column i.
template <bool KC>
struct SharedPlanes {
  static constexpr bool kKC = KC, kPlanes = true;
  const __nv_bfloat16* p;
  int cols, kPlane;
  __device__ __forceinline__ void issue(float*, int) const {}
  __device__ __forceinline__ const __nv_bfloat16* hi(const float*) const { return p; }
  __device__ __forceinline__ int off(int i, int k0, int kk) const {
    return KC ? swizzled(i, k0 + kk, cols) : swizzled(k0 + kk, i, cols);
  }
};

// An fp32 operand's k-slice (n rows or columns) split from its ring slot into the staging planes (hi, then lo n kPitch
// elements on): element pair i of this thread's share is (row or col, 2 kp) and (row or col, 2 kp + 1) of the slice
// (mma_layout.h slice_pair; tests/cpu/test_mma_layout.cpp emulates this staging and the warps' ldmatrix / mma over it).
template <int n, class O>
__device__ __forceinline__ void stage_split(const O& o, const float* slot, __nv_bfloat16* planes) {
  constexpr int E = n * kKS / 2 / kThreads;  // element pairs per thread
  static_assert(E * 2 * kThreads == n * kKS, "block_gemm: staging must tile");
#pragma unroll
  for (int i = 0; i < E; ++i) {
    const SlicePair sp = slice_pair(static_cast<int>(threadIdx.x) + i * kThreads, n, kKS / 2, O::kKC);
    store_split2(planes, n * kPitch, sp.row * kPitch + 2 * sp.kp, o.at(slot, sp.row, 2 * sp.kp),
                 o.at(slot, sp.row, 2 * sp.kp + 1));
  }
}

// acc (+)= A B for the block's 64 x N output, A = oa (i = row) [64 x kin], B = ob (i = col) [N x kin], kin a multiple
// of kKS, in bf16x3 on mma.m16n8k16 (chunk_common.cuh: ~16-bit operands, fp32 accumulation; the rounding model passes
// backward-quick with these products at the fp32 products' figures, bench/results/
// 2026-11-30-cpu-model-grad-products-bf16x3-tf32.log). Each operand element is split into its hi / lo planes once
// (3xTF32 split every fragment in every warp: session 7's gradprodtc lost to fp32 SIMT): an fp32 operand when staged,
// a planes operand before it gets here; the mma loop only ldmatrix-es and multiplies. Warp w owns rows 16 (w % 4) ..
// + 15 and columns (N / 2) (w / 4) .. + N / 2 - 1 (N / 16 n-tiles of 8); acc[e][nt] is element e of n-tile nt's C
// fragment (for_each_out maps it back). Slice s: wait for its copies, barrier (everyone's copies of s visible; the
// planes and ring slot of s - 1 free), issue slice s + kDepth - 1's copies, split the fp32 operands of s from their
// ring slots into the staging planes and barrier (skipped when both operands are planes), mma. Every slice commits one
// copy group (empty past the end), so wait_group<kDepth - 2> always means "slice s has landed". Ends with a barrier,
// so the caller may restage right after.
template <int N, class OA, class OB>
__device__ __forceinline__ void block_gemm(float* As_f, float* Bs_f, float* ring_a, float* ring_b, int kin,
                                           const OA& oa, const OB& ob, float (&acc)[4][N / 16]) {
  constexpr int PA = kC * kPitch, PB = N * kPitch;  // staging plane sizes (elements)
  __nv_bfloat16* const As = reinterpret_cast<__nv_bfloat16*>(As_f);
  __nv_bfloat16* const Bs = reinterpret_cast<__nv_bfloat16*>(Bs_f);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int m0 = 16 * (warp & 3), n0 = (N / 2) * (warp >> 2);
  const int slices = kin / kKS;
  auto issue = [&](int sl) {
    if (sl < slices) {
      oa.issue(ring_a + (sl % kDepth) * kSlotA, sl * kKS);
      ob.issue(ring_b + (sl % kDepth) * kSlotB, sl * kKS);
    }
    cp_async_commit();
  };
#pragma unroll
  for (int sl = 0; sl < kDepth - 1; ++sl) issue(sl);
  // Each lane's ldmatrix row (mma_layout.h): staged operands and planes contiguous in k are read as stored (A m-major,
  // B n-major), planes contiguous in i transposed (.trans).
  constexpr bool kTA = OA::kPlanes && !OA::kKC, kTB = OB::kPlanes && !OB::kKC;
  const LdsmRow la = kTA ? ldsm_a_kmajor(lane) : ldsm_a_rowmajor(lane);
  const LdsmRow lb = kTB ? ldsm_b_kmajor(lane) : ldsm_b_nmajor(lane);
  const int ai = m0 + (kTA ? la.col : la.row), ak = kTA ? la.row : la.col;  // lane's (i, kk) in A's 16 x 16 tile
  const int bi = n0 + (kTB ? lb.col : lb.row), bk = kTB ? lb.row : lb.col;  // and in B's (n-tile pair np: i + 16 np)
  for (int sl = 0; sl < slices; ++sl) {
    const int k0 = sl * kKS;
    cp_async_wait<kDepth - 2>();
    __syncthreads();
    issue(sl + kDepth - 1);
    const float* const sa = ring_a + (sl % kDepth) * kSlotA;
    const float* const sb = ring_b + (sl % kDepth) * kSlotB;
    if constexpr (!OA::kPlanes) stage_split<kC>(oa, sa, As);
    if constexpr (!OB::kPlanes) stage_split<N>(ob, sb, Bs);
    if constexpr (!OA::kPlanes || !OB::kPlanes) __syncthreads();
    // Where the warps' ldmatrix finds A's and B's planes for this slice: the staging, or the operand's own planes.
    const __nv_bfloat16 *ah_p = As, *bh_p = Bs;
    int pa = PA, pb = PB;
    if constexpr (OA::kPlanes) ah_p = oa.hi(sa), pa = oa.kPlane;
    if constexpr (OB::kPlanes) bh_p = ob.hi(sb), pb = ob.kPlane;
    auto a_at = [&](int i, int kk) {
      if constexpr (OA::kPlanes) return oa.off(i, k0, kk);
      else return i * kPitch + kk;
    };
    auto b_at = [&](int i, int kk) {
      if constexpr (OB::kPlanes) return ob.off(i, k0, kk);
      else return i * kPitch + kk;
    };
#pragma unroll
    for (int kk = 0; kk < kKS; kk += 16) {
      uint32_t ah[4], al[4];
      const int ea = a_at(ai, kk + ak);
      ldsm_x4<kTA>(ah, ah_p + ea);
      ldsm_x4<kTA>(al, ah_p + pa + ea);
#pragma unroll
      for (int np = 0; np < N / 32; ++np) {
        uint32_t bh[4], bl[4];
        const int eb = b_at(bi + 16 * np, kk + bk);
        ldsm_x4<kTB>(bh, bh_p + eb);
        ldsm_x4<kTB>(bl, bh_p + pb + eb);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float c[4] = {acc[0][2 * np + h], acc[1][2 * np + h], acc[2][2 * np + h], acc[3][2 * np + h]};
          mma_bf16x3(c, ah, al, bh, bl, h);
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[e][2 * np + h] = c[e];
        }
      }
    }
  }
  cp_async_wait<0>();  // the empty groups past the end
  __syncthreads();
}

template <int N>
__device__ __forceinline__ void zero(float (&acc)[4][N / 16]) {
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < N / 16; ++j) acc[i][j] = 0.0f;
}

// Calls epi(row, col, x, y) for each pair of this thread's block_gemm outputs at (row, col) and (row, col + 1) (the
// m16n8 C fragment: c0, c1 at row grp, columns 2 tig, +1; c2, c3 at row grp + 8).
template <int N, class Epi>
__device__ __forceinline__ void for_each_out2(const float (&acc)[4][N / 16], Epi epi) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, grp = lane >> 2, tig = lane & 3;
  const int m0 = 16 * (warp & 3), n0 = (N / 2) * (warp >> 2);
#pragma unroll
  for (int nt = 0; nt < N / 16; ++nt) {
    const int c = n0 + 8 * nt + 2 * tig;
    epi(m0 + grp, c, acc[0][nt], acc[1][nt]);
    epi(m0 + grp + 8, c, acc[2][nt], acc[3][nt]);
  }
}

// An output pair (row, col), (row, col + 1) of a tile only a later launch reads (dM, QS, KD, dA): one 8-byte store,
// cache-streaming (st.global.cs, evict first in L2) so these 96 KB a task do not push out the operands this kernel's
// own GEMMs read again (S0 three times, V_new, dS_end, -dU twice, BV and BK, which keep the default policy). With the
// scalar stores of before, L2 was 88% busy and the kernel moved ~630 KB of DRAM traffic a task against ~450 KB of
// unique bytes (ncu, session 35); these stores alone took it from 2.11 to 1.79 ms at train-h64-fixed.
__device__ __forceinline__ void store_pair(float* p, float x, float y) {
  __stcs(reinterpret_cast<float2*>(p), make_float2(x, y));
}

// 256 threads at 128 registers (ptxas 13.0, sm_90a: 36 / 20 bytes of spill stores at K = V = 128 with / without the
// wgmma P1, 60 at K = V = 64, 232-264 where K != V; a 32-step k-slice spilled 90-350 bytes): two CTAs per SM, 16 warps.
// The kernel is bound by its bytes (docs/backward.md), so those spills were left. Value heads
// hv0 .. hv0 + heads - 1 (all of them but where backward_chunked.cu overlaps a partial last wave of the reverse pass
// with the other heads' products), CTA x taking chunk x / heads, head hv0 + x % heads: each chunk's heads side by
// side, as with all of them.
// kHopper: P1 on wgmma (products_wgmma.cuh; K = V = 128, launched only where the Hopper path runs: chunk_products.cu),
// its slices copied through maps (the other instances leave them unused); the instance's sm_80 code is the mma.sync
// form.
// One task's products (products_kernel's CTA x, or a ticket of the gradient pipe): x as the grid index of a launch over
// heads value heads from hv0; smem the CTA's dynamic shared memory (ProdSmem's bytes, 1 KB aligned).
template <int K, int V, bool kHopper>
__device__ __forceinline__ void products_task(const BackwardParams& bp, char* ws, int hv0, int heads,
                                              const sm90::ProductsMaps& maps, unsigned x, float* smem) {
  using Ly = ProdSmem<K, V>;
  static_assert(!kHopper || (K == 128 && V == 128), "products: the wgmma P1 is built for K = V = 128");
  [[maybe_unused]] constexpr bool kWgmma = KDA_PRODUCTS_WGMMA && kHopper;
  const ForwardParams& p = bp.f;
  float* const As = smem + Ly::kAs;
  float* const Bs = smem + Ly::kBs;
  // -dU S0 as planes [C][K] (P2's operand); until it is written, dO' as planes [C][V] (P1's).
  __nv_bfloat16* const dWs = reinterpret_cast<__nv_bfloat16*>(smem + Ly::kDW);
  __nv_bfloat16* const dOs = dWs;

  const int tid = threadIdx.x;
  const BackwardLayout bl = backward_layout(p.B, p.T, p.N, p.HV, K, V, p.group);
  const WorkspaceLayout& wl = bl.fwd;
  const int64_t count = *reinterpret_cast<const int64_t*>(ws);
  const int64_t ci = x / heads;
  if (ci >= count) return;  // past the list: the per-channel pass skips these tasks too
  const int hv = hv0 + static_cast<int>(x % heads);
  const int64_t task = ci * p.HV + hv;
  const ChunkRec rec = reinterpret_cast<const ChunkRec*>(ws + wl.list)[ci];
  const int L = rec.len;
  const int64_t b = p.has_cu_seqlens() ? 0 : rec.seq, t0 = rec.start;
  const TileLayout tl{K, V};
  const ProdLayout pl{K, V};
  // The saves as their writers left them, bf16 planes (hi, then lo; chunk_map.h BackwardLayout): S0, dS_end [V][K],
  // V_new and -dU [C][V].
  using Planes = const __nv_bfloat16*;
  const Planes S0 = reinterpret_cast<Planes>(ws + bl.starts) + task * 2 * int64_t{V} * K;
  const Planes dSe = reinterpret_cast<Planes>(ws + bl.dsend) + task * 2 * int64_t{V} * K;
  const Planes Vn = reinterpret_cast<Planes>(ws + bl.vnew) + task * 2 * int64_t{kC} * V;
  const Planes nU = reinterpret_cast<Planes>(ws + bl.du) + task * 2 * int64_t{kC} * V;
  const Planes Tp = reinterpret_cast<Planes>(ws + bl.tinv) + task * 2 * int64_t{kC} * kC;  // zeros above its diagonal
  const float* const tile = reinterpret_cast<const float*>(ws + wl.tiles) + task * tl.floats();
  const float* const U0 = tile + tl.U();
  const __nv_bfloat16* const Wp = reinterpret_cast<const __nv_bfloat16*>(tile + tl.W());  // hi, then lo plane
  float* const out = reinterpret_cast<float*>(ws + bl.prod) + task * pl.floats();
  float* const dM = out + pl.dM();
  float* const dA = out + pl.dA();
  float* const QS = out + pl.QS();
  float* const KD = out + pl.KD();
  float* const BK = out + pl.BK();
  float* const BV = out + pl.BV();
  const TensorView& dO = bp.dout;

  float* const ring_a = smem + Ly::kRingA;
  float* const ring_b = smem + Ly::kRingB;
  // Every operand's last read is copied evict-first (and the tiles only later launches read are stored streaming,
  // store_pair): what stays in L2 is what this CTA reads again (session 35: products 2.11 -> 1.64 ms, L2 88% -> 72%
  // busy, DRAM 5.2 -> 4.2 GB at train-h64-fixed).
  const uint64_t last = evict_first();
  float* const cs_part = As;  // CS's partial sums, [R][K]: 2048 floats, in the A and B staging (>= 3072)
#if KDA_PRODUCTS_WGMMA
  // The wgmma P1 forms CS inside its first pass (products_wgmma.cuh ProductsCs), and its first slice's copies land
  // while dO' is staged below.
  [[maybe_unused]] uint64_t* const bars = reinterpret_cast<uint64_t*>(smem + Ly::kBar);
  // The task's first plane in the maps (an int32: launch_products takes this instance only where products_maps_fit).
  [[maybe_unused]] const int plane = static_cast<int>(2 * task);
  if constexpr (kWgmma) sm90::products_p1_begin(reinterpret_cast<unsigned char*>(ring_a), bars, maps, plane);
#endif
  // ---- CS (the mma.sync P1): colsum(S0 . dS) per channel, each factor hi + lo (its planes' value: within 2^-16
  // relative of the fp32 value, as in the bf16x3 products). Every thread takes 8 consecutive channels of rows r,
  // r + R, ... (R = 256 * 8 / K rows a pass; 16-byte loads of both planes of both factors), its partial sums go to the
  // staging (free until P3's first split, barriers away) and thread d < K adds channel d's R partials in row order.
  // Why all 256 threads: on 128 (a channel a thread, 2-byte loads), CS was ~45 M of the kernel's 459 M instructions on
  // 4 warps while the other 4 waited at P1's first barrier (ncu, session 27).
  if constexpr (!kWgmma) {
    constexpr int P = V * K, G = K / 8, R = kThreads / G;
    static_assert(R * G == kThreads && V % R == 0 && R * K <= Ly::kDW - Ly::kAs, "products: CS must tile");
    const int d0 = 8 * (tid % G), r0 = tid / G;
    float cs[8] = {};
#pragma unroll 4
    for (int v = r0; v < V; v += R) {
      const int e = v * K + d0;
      float sh[8], sl[8], dh[8], dl[8];  // the four 16-byte loads issued before any use
      cvt8(*reinterpret_cast<const uint4*>(S0 + e), KDA_DTYPE_BFLOAT16, sh);
      cvt8(*reinterpret_cast<const uint4*>(S0 + P + e), KDA_DTYPE_BFLOAT16, sl);
      cvt8(*reinterpret_cast<const uint4*>(dSe + e), KDA_DTYPE_BFLOAT16, dh);
      cvt8(*reinterpret_cast<const uint4*>(dSe + P + e), KDA_DTYPE_BFLOAT16, dl);
#pragma unroll
      for (int j = 0; j < 8; ++j) cs[j] = fmaf(sh[j] + sl[j], dh[j] + dl[j], cs[j]);
    }
    float4* const dst = reinterpret_cast<float4*>(cs_part + r0 * K + d0);
    dst[0] = make_float4(cs[0], cs[1], cs[2], cs[3]);
    dst[1] = make_float4(cs[4], cs[5], cs[6], cs[7]);
  }

  // ---- P1: the products with the state and V_new (inner dimension V). dO' = scale dO, rows past L zeros, staged once
  // in shared memory as swizzled bf16 planes (what block_gemm's ldmatrix reads): thread tid takes column tid % V of
  // rows tid / V + R i, the raw bits of its kE elements loaded first (the dtype test outside: per-element tests
  // spilled on sm_80), converted after (kE = 32 registers at V = 128, before any accumulator is live). Converted in
  // every k-slice fetch of the two products that read it, these loads held 41% of the kernel's stall samples (ncu,
  // H200).
  // Where dO's channels are contiguous 16-bit values on 16-byte boundaries (what a framework's bf16 / fp16 gradient
  // is), each thread takes 16-byte pieces instead (8 values of a row, consecutive threads along the row), each split
  // into one 16-byte store a plane (both layouts keep 8 values of a row whole): the element-wise form's 32 two-byte
  // loads and 64 plane stores a thread were ~13% of the kernel's stall samples on the Hopper path (ncu, session 39).
  const bool do_pieces = dO.dtype != KDA_DTYPE_FLOAT32 && dO.stride[3] == 1 &&
                         reinterpret_cast<uintptr_t>(dO.data) % 16 == 0 && dO.stride[0] % 8 == 0 &&
                         dO.stride[1] % 8 == 0 && dO.stride[2] % 8 == 0;
  if (do_pieces) {
    constexpr int kP = kC * V / 8 / kThreads;  // pieces a thread
    static_assert(kP * 8 * kThreads == kC * V, "products: dO's pieces must tile the CTA");
    const uint16_t* const src = static_cast<const uint16_t*>(dO.data) + b * dO.stride[0] + t0 * dO.stride[1] +
                                hv * dO.stride[2];
    uint4 raw[kP];
#pragma unroll
    for (int j = 0; j < kP; ++j) {
      const int i = tid + kThreads * j, t = i / (V / 8), v = 8 * (i % (V / 8));
      raw[j] = t < L ? ldg16(src + t * dO.stride[1] + v) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int j = 0; j < kP; ++j) {
      const int i = tid + kThreads * j, t = i / (V / 8), v = 8 * (i % (V / 8));
      float x[8];
      cvt8(raw[j], dO.dtype, x);
      uint4 h, l;
      split_bf16x2(p.scale * x[0], p.scale * x[1], h.x, l.x);
      split_bf16x2(p.scale * x[2], p.scale * x[3], h.y, l.y);
      split_bf16x2(p.scale * x[4], p.scale * x[5], h.z, l.z);
      split_bf16x2(p.scale * x[6], p.scale * x[7], h.w, l.w);
      int e = swizzled(t, v, V);
#if KDA_PRODUCTS_WGMMA
      if constexpr (kWgmma) e = static_cast<int>(sm90::plane_at<sm90::ProductsWgmma::LayO>(dOs, t, v) - dOs);
#endif
      *reinterpret_cast<uint4*>(dOs + e) = h;
      *reinterpret_cast<uint4*>(dOs + kC * V + e) = l;
    }
  } else {
    constexpr int R = kThreads / V, kE = kC / R;
    static_assert(R * V == kThreads && kE * R == kC, "products: dO' must tile the CTA");
    const int v = tid % V, r0 = tid / V;
    uint32_t raw[kE];
    load_bits_strided(raw, dO.data, dO.dtype,
                      b * dO.stride[0] + (t0 + r0) * dO.stride[1] + hv * dO.stride[2] + v * dO.stride[3],
                      R * dO.stride[1], (L - r0 + R - 1) / R);  // rows r0 + R i < L (L - r0 + R - 1 >= 0: r0 < R)
#pragma unroll
    for (int i = 0; i < kE; ++i) {
      const int t = r0 + R * i;
      int e = swizzled(t, v, V);  // the planes block_gemm's ldmatrix reads, or wgmma's (LayO)
#if KDA_PRODUCTS_WGMMA
      if constexpr (kWgmma) e = static_cast<int>(sm90::plane_at<sm90::ProductsWgmma::LayO>(dOs, t, v) - dOs);
#endif
      store_split1(dOs, kC * V, e, t < L ? p.scale * bits_to_float(raw[i], dO.dtype) : 0.0f);
    }
  }
  __syncthreads();  // dO' staged, CS's partials written
  if (!kWgmma && tid < K) {
    constexpr int R = kThreads / (K / 8);
    float cs = 0.0f;
#pragma unroll
    for (int r = 0; r < R; ++r) cs += cs_part[r * K + tid];
    out[pl.CS() + tid] = cs;
  }
  auto epi_m = [&](int r, int c, float x, float y) {
    store_pair(dM + r * kC + c, c <= r ? x : 0.0f, c + 1 <= r ? y : 0.0f);
  };
  auto epi_q = [&](int r, int c, float x, float y) { store_pair(QS + r * K + c, x, y); };
  auto epi_k = [&](int r, int c, float x, float y) { store_pair(KD + r * K + c, x, y); };
  auto epi_w = [&](int r, int c, float x, float y) { store_split2(dWs, kC * K, swizzled(r, c, K), x, y); };
#if KDA_PRODUCTS_WGMMA
  if constexpr (kWgmma) {
    sm90::require_1k_aligned(reinterpret_cast<unsigned char*>(smem));
    sm90::products_p1(reinterpret_cast<unsigned char*>(dOs), reinterpret_cast<unsigned char*>(ring_a), bars, maps,
                      plane, S0, cs_part, out + pl.CS(), epi_m, epi_k, epi_q, epi_w);
  } else
#endif
  {
    const SharedPlanes<true> dOp{dOs, V, kC * V};                  // dO' (t, v)
    const GlobalPlanes<K, false> s0{S0, K, int64_t{V} * K, 0};     // S0 (v, d) as B: column d, k = v
    const GlobalPlanes<kC, true> vn{Vn, V, int64_t{kC} * V, 0};    // V_new (t, v): A with row t, B with column t; k = v
    const GlobalPlanes<kC, true> nu_a{nU, V, int64_t{kC} * V, 0};  // -dU (t, v) as A: row t, k = v
    {
      float acc[4][kC / 16];
      zero<kC>(acc);
      block_gemm<kC>(As, Bs, ring_a, ring_b, V, dOp, vn, acc);
      for_each_out2<kC>(acc, epi_m);
    }
    float acc[4][K / 16];
    zero<K>(acc);
    block_gemm<K>(As, Bs, ring_a, ring_b, V, dOp, s0, acc);
    for_each_out2<K>(acc, epi_q);
    zero<K>(acc);
    block_gemm<K>(As, Bs, ring_a, ring_b, V, GlobalPlanes<kC, true>{Vn, V, int64_t{kC} * V, last},
                  GlobalPlanes<K, false>{dSe, K, int64_t{V} * K, last}, acc);
    for_each_out2<K>(acc, epi_k);
    zero<K>(acc);
    block_gemm<K>(As, Bs, ring_a, ring_b, V, nu_a, GlobalPlanes<K, false>{S0, K, int64_t{V} * K, last},
                  acc);  // dW = (-dU) S0
    for_each_out2<K>(acc, epi_w);
  }
  __syncthreads();

  // ---- P2: BV = T^T dU, BK = T^T dW (A (t, r) = T[r][t]; phase 1 stored T's planes with zeros above the diagonal).
  const GlobalPlanes<kC, false> tT{Tp, kC, int64_t{kC} * kC, 0};  // T^T: A (t, r) = T[r][t]
  {
    float acc[4][V / 16];
    zero<V>(acc);
    block_gemm<V>(As, Bs, ring_a, ring_b, kC, tT, GlobalPlanes<V, false>{nU, V, int64_t{kC} * V, last}, acc);
    for_each_out2<V>(acc, [&](int r, int c, float x, float y) {  // T^T dU = -(T^T (-dU))
      *reinterpret_cast<float2*>(BV + r * V + c) = make_float2(-x, -y);
    });
  }
  {
    float acc[4][K / 16];
    zero<K>(acc);
    block_gemm<K>(As, Bs, ring_a, ring_b, kC, GlobalPlanes<kC, false>{Tp, kC, int64_t{kC} * kC, last},
                  SharedPlanes<false>{dWs, K, kC * K}, acc);
    for_each_out2<K>(acc, [&](int r, int c, float x, float y) {
      *reinterpret_cast<float2*>(BK + r * K + c) = make_float2(x, y);
    });
  }
  // BV and BK (global, this CTA's own writes) are P3's operands, read back by cp.async.cg from L2: the fence makes
  // the writes visible there, not only in this SM's L1.
  __threadfence();
  __syncthreads();

  // ---- P3: dA = -strictly_lower(BV U0^T + BK W^T); W from its bf16 hi / lo planes.
  {
    float acc[4][kC / 16];
    zero<kC>(acc);
    block_gemm<kC>(As, Bs, ring_a, ring_b, V, GlobalF32<kC, true>{BV, V, last}, GlobalF32<kC, true>{U0, V, last},
                   acc);
    block_gemm<kC>(As, Bs, ring_a, ring_b, K, GlobalF32<kC, true>{BK, K, last},
                   GlobalPlanes<kC, true>{Wp, K, int64_t{kC} * K, last}, acc);
    for_each_out2<kC>(acc, [&](int r, int c, float x, float y) {
      store_pair(dA + r * kC + c, c < r ? -x : 0.0f, c + 1 < r ? -y : 0.0f);
    });
  }
}

}  // namespace kda::cuda::chunk::products
