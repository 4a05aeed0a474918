// chunk_state.cu: phase 2 of the two-phase chunked forward: the sequential state pass. One CTA of 512 threads
// (16 warps) per (sequence n, value head hv, V tile of BV columns, BV in {32, 64} chosen at run time by
// plan_state_pass so the grids fill the GPU: one launch, or two over consecutive ranges of chains n HV + hv). The CTA
// walks its sequence's chunks (the chunk list of chunk_map.h) in order with its BV x K slice of the fp32 state in
// the registers of warps 0-7 (the chain warps), and per chunk, from phase 1's tiles (chunk_prepare.cu):
//   1  V_new = U - W S^T                                   [64 x BV]   -> smem              (chain warps, phase A)
//   2  o = scale (Qg S^T + A_qk V_new), stored in the output dtype for the chunk's L rows
//                                    (output warps 8-15: Qg S^T in phase A, + A_qk V_new and the store in phase B)
//   3  S = S diag(decay) + V_new^T Kd                      [BV x K]    (registers, then the split smem copy;
//                                                                       chain warps, phase B)
// Why two roles: the output is off the chain from one state to the next. With one set of 8 warps running steps 1, 2
// and 3 in turn behind six barriers a chunk, the chunk took ~10.5 K cycles at h64-fixed (ncu, 1829c28: 757 us for 128
// chunks, SM throughput 35%, one CTA and 8 warps per SM), against ~4-5 K of tensor issue. Now each phase runs 16
// warps on two independent products, and a chunk has two barriers.
// The state is loaded from initial_state (either layout, or zeros) and written to final_state (either layout).
// Segmented (SegmentArgs, the kSeg instance; chunk_segments.cu): a CTA walks one segment of its chain, from zeros or
// the identity (the transition's rows, v0 >= V, with U = 0 and no output) or a hand-off state, to a workspace end.
// For the backward's recompute (BackwardSaves, chunk_kernels.h) it also writes each chunk's start state and V_new,
// as bf16 hi / lo planes (the split this pass makes of them for its own products), and skips the output where p.out
// is null.
//
// Precision: every product is bf16x3 on mma.m16n8k16 (chunk_common.cuh): both operands split into bf16 hi / lo,
// three bf16 products, fp32 accumulation; the state itself is only ever accumulated in fp32 (registers). Why: with
// near-identical keys and beta near 1 or 2, V_new = U - W S^T is a small difference of large terms, and the chunk's
// V_new rows are large and cancel in V_new^T Kd and A_qk V_new; one rounding of those products' operands to tf32
// (2^-11) left state errors past the tensor-core bound 2^-9 on the H200 (3.30e-3 and 3.08e-3 against 1.95e-3,
// stress_near_identical_keys and stress_beta_at_2_negative_eigenvalues). The CPU model of this path's rounding
// (scripts/models/two_phase.py, kda-verify --suite full --filter stress_ --seed 1; docs/numerics.md) gives for those
// two probes, bf16x3 everywhere in both phases: state 6.2e-5 and 6.4e-5, output 2.9e-3 (Qg S^T in single bf16;
// the bf16 rounding of the output alone is 1.7e-3); single bf16 in phase 1: state 2.0e-3 and 2.1e-2 (fails). bf16x3
// costs three bf16 mma per product, which run at the rate of 1.5 tf32 mma: 6 tf32-equivalents per chunk for the four
// products, against 10 for the 3xTF32 (+ one tf32) arrangement it replaces, and the operands need no conversion in
// the loop: phase 1 stores W, Qg, Kd and A_qk pre-split as hi / lo bf16 planes (the bytes of one fp32 tile), loaded
// with cp.async and read with ldmatrix; V_new and the state are split once when written.
//
// Loads overlap the math: the chunk's tiles come in two cp.async groups, each issued as soon as its buffers are free
// and waited for just before the phase that reads them: A = {W, U, Qg} (phase A), issued after phase A of the
// previous chunk, so it lands behind that chunk's phase B; B = {Kd, decay, A_qk} (phase B), issued at the start of
// its own chunk's phase A. (Asking L2 for the next chunk's tile a chunk ahead, as the reverse pass does, changed
// nothing at h64-fixed and cost 15-25 us at h96-fixed: bench/LEDGER.md, session 17.)
// Shared memory (K = 128, BV = 64): bf16 hi / lo planes of W, Qg, Kd [64][K + 8], of the state [BV][K + 8], A_qk
// [64][72], V_new [64][BV + 8]; U fp32 [64][BV + 4]; decay [K]: 194,048 bytes, one CTA per SM (BV = 32: 160,256).
// Plane pitches are 16 bytes mod 128, so the 8 rows of an ldmatrix hit 8 different 16-byte bank groups.
// Registers (<= 128 a thread for 512 threads): the state tile K / (8 NSPLIT) x 4 fp32 (32 at BV = 64, K = 128) lives in
// the chain warps' registers across chunks; the phase A accumulators BV / 16 x 4 (the output warps hold theirs into
// phase B). sm_90a: 122 registers at K = 128, BV = 64, no spills.
#include <climits>
#include <cstdint>

#include "cuda/device_common.cuh"
#include "cuda/generic/chunk_common.cuh"
#include "cuda/generic/chunk_kernels.h"
#include "cuda/generic/chunk_map.h"
#include "cuda/generic/mma_layout.h"

namespace kda::cuda::chunk {
namespace {

constexpr int kThreads = 512;  // 8 chain warps + 8 output warps; 128 registers a thread
constexpr int kC = kChunk;
using bf16 = __nv_bfloat16;

// Byte offsets of the shared-memory buffers; a plane pair is the hi plane followed by the lo plane.
template <int K, int BV>
struct StateLayout {
  static constexpr int PK = K + 8;   // W, Qg, Kd, state planes (bf16 elements per row)
  static constexpr int PA = kC + 8;  // A_qk planes
  static constexpr int PV = BV + 8;  // V_new planes
  static constexpr int PU = BV + 4;  // U (fp32)
  static constexpr int kRowPlane = kC * PK, kSPlane = BV * PK, kAPlane = kC * PA, kVPlane = kC * PV;  // elements
  static constexpr size_t kW = 0, kQ = kW + 4 * kRowPlane, kKd = kQ + 4 * kRowPlane, kS = kKd + 4 * kRowPlane;
  static constexpr size_t kA = kS + 4 * kSPlane, kVn = kA + 4 * kAPlane, kU = kVn + 4 * kVPlane;
  static constexpr size_t kDec = kU + 4 * kC * PU;
  static constexpr size_t kBytes = kDec + 4 * K;
};

// kSeg: the instance for segmented passes (SegmentArgs); the unsplit one compiles without their code.
template <int K, int BV, bool kSeg>
__global__ void __launch_bounds__(kThreads, 1) state_kernel(const ForwardParams p, const char* ws, int vtiles,
                                                            int64_t chain0, const BackwardSaves keep,
                                                            const SegmentArgs sg) {
  using Ly = StateLayout<K, BV>;
  constexpr int PK = Ly::PK, PA = Ly::PA, PV = Ly::PV, PU = Ly::PU;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* const Wh = reinterpret_cast<bf16*>(smem + Ly::kW);
  bf16* const Qh = reinterpret_cast<bf16*>(smem + Ly::kQ);
  bf16* const Kh = reinterpret_cast<bf16*>(smem + Ly::kKd);
  bf16* const Sh = reinterpret_cast<bf16*>(smem + Ly::kS);
  bf16* const Ah = reinterpret_cast<bf16*>(smem + Ly::kA);
  bf16* const Vh = reinterpret_cast<bf16*>(smem + Ly::kVn);
  float* const Us = reinterpret_cast<float*>(smem + Ly::kU);
  float* const dec = reinterpret_cast<float*>(smem + Ly::kDec);
  // The lo plane of each pair, `plane` elements after its hi plane.
  const bf16* const Wl = Wh + Ly::kRowPlane;
  const bf16* const Ql = Qh + Ly::kRowPlane;
  const bf16* const Kl = Kh + Ly::kRowPlane;
  const bf16* const Sl = Sh + Ly::kSPlane;
  const bf16* const Al = Ah + Ly::kAPlane;
  const bf16* const Vl = Vh + Ly::kVPlane;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int grp = lane >> 2, tig = lane & 3;
  const int V = p.V;
  // A segmented pass (SegmentArgs, chunk_map.h plan_segments): this CTA's segment, and whether its rows are the
  // transition's (v0 >= V: identity at the start, U = 0, no output).
  const bool segmented = kSeg && sg.segments > 1;
  const SegTile st = segmented ? seg_tile(blockIdx.x, sg.pass, sg.segments, BV, V, K, chain0, p.HV) : SegTile{};
  const ChainTile ct = segmented ? ChainTile{st.rank, st.hv, st.v0 / BV, st.v0}
                                 : chain_tile(blockIdx.x, vtiles, chain0, BV, p.HV);
  const int hv = ct.hv, v0 = ct.v0;
  const SegmentRole role = segmented ? segment_role(st, sg.pass, sg.segments, V, K)
                                     : SegmentRole{SegmentRole::kInitial, 0, SegmentRole::kFinal, 0, true, false};
  const bool m_rows = role.transition, write_out = p.out != nullptr && role.outputs;

  const WorkspaceLayout wl = workspace_layout(p.B * p.T, p.N, p.HV, K, V);
  const ChainChunks cc = chain_chunks(ws, wl, ct.rank, p.has_cu_seqlens());
  const int64_t n = cc.n;
  const ChunkRec* const list = cc.list;
  const float* const tiles = cc.tiles;
  int64_t first = cc.first, last = cc.last;
  if (segmented) segment_chunks(cc.first, cc.last, st.seg, sg.segments, &first, &last);
  const int64_t b = cc.b;
  const TileLayout tl{K, V};
  // The segment's end rows [v][K] in the workspace (X_1, or [B_seg; M_seg]), or null (the final state, or nothing).
  float* const seg_end = role.end == SegmentRole::kStarts ? sg.starts + role.end_at
                         : role.end == SegmentRole::kEnds ? sg.ends + role.end_at
                                                          : nullptr;

  // The two load groups of chunk ci (every thread commits each group, empty or not, so the counts agree): A = the
  // tiles phase A reads {W, U, Qg}, B = those phase B reads {Kd, decay, A_qk}.
  auto tile_of = [&](int64_t ci) { return tiles + (ci * p.HV + hv) * tl.floats(); };
  auto load_a = [&](int64_t ci) {
    if (ci < last) {
      const float* t = tile_of(ci);
      load_planes<kThreads, kC, K, PK>(Wh, reinterpret_cast<const bf16*>(t + tl.W()), tid);
      load_planes<kThreads, kC, K, PK>(Qh, reinterpret_cast<const bf16*>(t + tl.Qg()), tid);
      // U [64][V] fp32 rows, this tile's BV columns, in passes of 4-float pieces (chunk_map.h copy_piece); the
      // transition's rows take U = 0 (zeroed once below).
      constexpr int kURows = copy_rows_per_pass(BV, 4, kThreads);
      static_assert(kThreads % (BV / 4) == 0 && kC % kURows == 0, "U copy: passes must tile the rows");
      const CopyPiece u0 = copy_piece(tid, 0, BV, 4, kThreads);
      const float* const usrc = t + tl.U() + int64_t{u0.row} * V + v0 + u0.col;
#pragma unroll
      for (int i = 0; i < kC / kURows; ++i)
        if (!m_rows) cp_async16(Us + (u0.row + kURows * i) * PU + u0.col, usrc + int64_t{kURows * i} * V);
    }
    cp_async_commit();
  };
  auto load_b = [&](int64_t ci) {
    if (ci < last) {
      const float* t = tile_of(ci);
      load_planes<kThreads, kC, K, PK>(Kh, reinterpret_cast<const bf16*>(t + tl.Kd()), tid);
      load_planes<kThreads, kC, kC, PA>(Ah, reinterpret_cast<const bf16*>(t + tl.Aqk()), tid);
      for (int e = tid; e < K / 4; e += kThreads) cp_async16(dec + 4 * e, t + tl.decay() + 4 * e);
    }
    cp_async_commit();
  };
  if (m_rows)
    for (int e = tid; e < kC * PU; e += kThreads) Us[e] = 0.0f;  // before the first barrier, as load_a's copies
  load_a(first);

  // ldmatrix rows of this lane (mma_layout.h).
  const LdsmRow ra = ldsm_a_rowmajor(lane), rat = ldsm_a_kmajor(lane), rb = ldsm_b_nmajor(lane),
                rbt = ldsm_b_kmajor(lane);
  // Roles: warps 0-7 carry the state (steps 1 and 3), warps 8-15 compute the output (step 2, o = Qg S^T in phase A,
  // + A_qk V_new in phase B). Both use the same tiling of a [64 x BV] product: warp w (mod 8) = rows 16 m .. (4 row
  // tiles), columns (BV / 2) nh2 .. (NT = BV / 16 n-tiles of 8).
  constexpr int NT = BV / 16;
  const bool chain = warp < 8;
  const int w8 = warp & 7, m = w8 & 3, nh2 = w8 >> 2;
  const int r0 = 16 * m + grp, r1 = r0 + 8, cw = (BV / 2) * nh2;
  // Step 3: chain warp = state rows 16 mv .. (BV / 16 row tiles), columns dn0 .. (K / NSPLIT, NT3 n-tiles of 8).
  constexpr int MT = BV / 16, NSPLIT = 8 / MT, NT3 = K / (8 * NSPLIT);
  const int mv = w8 % MT, dn0 = (w8 / MT) * (K / NSPLIT);
  const int sv = 16 * mv + grp;  // this lane's state rows sv, sv + 8; columns dn0 + 8 nt + 2 tig, +1

  // The state tile in registers (the C fragments of step 3; chain warps only), from initial_state or zeros; its
  // split copy in smem.
  float S[NT3][4];
  if (chain) {
    for_each_tile_element<NT3>(sv, dn0, tig, [&](int nt, int e, int v, int d) {
      if (role.start == SegmentRole::kHandOff)
        S[nt][e] = sg.starts[role.start_at + int64_t{v0 + v} * K + d];
      else if (role.start != SegmentRole::kInitial)  // B from zero, M from the identity
        S[nt][e] = role.start == SegmentRole::kIdentity && v0 + v - V == d ? 1.0f : 0.0f;
      else
        S[nt][e] = p.has_initial_state() ? static_cast<const float*>(p.initial_state.data)[p.state_offset(
                                               p.initial_state.stride, n, hv, v0 + v, d)]
                                         : 0.0f;
    });
  }
  auto store_state_planes = [&] {
#pragma unroll
    for (int nt = 0; nt < NT3; ++nt) {
      const int d = dn0 + 8 * nt + 2 * tig;
      store_split2(Sh, Ly::kSPlane, sv * PK + d, S[nt][0], S[nt][1]);
      store_split2(Sh, Ly::kSPlane, (sv + 8) * PK + d, S[nt][2], S[nt][3]);
    }
  };
  if (chain) store_state_planes();

#pragma unroll 1
  for (int64_t ci = first; ci < last; ++ci) {
    const ChunkRec rec = list[ci];
    if (chain && keep.starts) {  // the backward's copy of the chunk-start state, value-first planes [2][V][K]
      bf16* const st = keep.starts + (ci * p.HV + hv) * 2 * int64_t{V} * K;
#pragma unroll
      for (int nt = 0; nt < NT3; ++nt) {
        const int d = dn0 + 8 * nt + 2 * tig;
        store_split2(st, int64_t{V} * K, int64_t{v0 + sv} * K + d, S[nt][0], S[nt][1]);
        store_split2(st, int64_t{V} * K, int64_t{v0 + sv + 8} * K + d, S[nt][2], S[nt][3]);
      }
    }

    // ---- Phase A: group A of this chunk, and the state planes of the previous chunk's phase B.
    cp_async_wait<0>();
    __syncthreads();
    load_b(ci);  // Kd, decay, A_qk: their buffers were freed by the barrier above, they land behind phase A
    // acc: the chain warps' W S^T (step 1), the output warps' Qg S^T (step 2's first term), held into phase B.
    // A = W or Qg [token][d] (m-major), B = S^T: the state planes [v][d] are n-major.
    float acc[NT][4];
    mma_times_state_t<NT, K>(acc, chain ? Wh : Qh, chain ? Wl : Ql, Sh, Sl, PK, 16 * m, cw, ra.row, ra.col, rb.row,
                             rb.col);
    if (chain) {  // ---- 1: V_new = U - W S^T
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const int col = cw + 8 * nt + 2 * tig;
        const float2 u0 = *reinterpret_cast<const float2*>(Us + r0 * PU + col);
        const float2 u1 = *reinterpret_cast<const float2*>(Us + r1 * PU + col);
        uint32_t h0, l0, h1, l1;
        split_bf16x2(u0.x - acc[nt][0], u0.y - acc[nt][1], h0, l0);
        split_bf16x2(u1.x - acc[nt][2], u1.y - acc[nt][3], h1, l1);
        store_planes2(Vh, Ly::kVPlane, r0 * PV + col, h0, l0);
        store_planes2(Vh, Ly::kVPlane, r1 * PV + col, h1, l1);
        if (keep.vnew) {  // the backward's copy of V_new: the same planes, [2][C][V]
          bf16* const vn = keep.vnew + (ci * p.HV + hv) * 2 * int64_t{kC} * V + v0 + col;
          store_planes2(vn, int64_t{kC} * V, r0 * V, h0, l0);
          store_planes2(vn, int64_t{kC} * V, r1 * V, h1, l1);
        }
      }
    }

    // ---- Phase B: group B of this chunk; V_new complete; every read of W, U, Qg and of the state planes done.
    cp_async_wait<0>();
    __syncthreads();
    load_a(ci + 1);  // W, U, Qg of the next chunk land behind phase B
    if (chain) {  // ---- 3: S = S diag(decay) + V_new^T Kd. A = V_new^T: the V_new planes [token][v] are k-major
                  // (trans); B = Kd [token][d] k-major (trans).
#pragma unroll
      for (int nt = 0; nt < NT3; ++nt) {
        const int d = dn0 + 8 * nt + 2 * tig;
        const float f0 = dec[d], f1 = dec[d + 1];
        S[nt][0] *= f0;
        S[nt][1] *= f1;
        S[nt][2] *= f0;
        S[nt][3] *= f1;
      }
      mma_kmajor_kmajor<NT3>(S, Vh, Vl, PV, 16 * mv, Kh, Kl, PK, dn0, 0, kC / 16, rat.row, rat.col, rbt.row, rbt.col);
      store_state_planes();  // no reader left: the output warps read the old planes in phase A only
    } else {  // ---- 2: o = scale (Qg S^T + tril(A_qk) V_new). A_qk [token][token'] m-major, V_new [token'][v]
              // k-major (ldmatrix.trans). A_qk is lower triangular (upper zeros): the k-steps stop at the diagonal.
      for (int ks = 0; ks <= m; ++ks) {
        uint32_t ah[4], al[4];
        const int ao = (16 * m + ra.row) * PA + 16 * ks + ra.col;
        ldsm_x4<false>(ah, Ah + ao);
        ldsm_x4<false>(al, Al + ao);
#pragma unroll
        for (int np = 0; np < NT / 2; ++np) {
          uint32_t bh[4], bl[4];
          const int bo = (16 * ks + rbt.row) * PV + cw + 16 * np + rbt.col;
          ldsm_x4<true>(bh, Vh + bo);
          ldsm_x4<true>(bl, Vl + bo);
          mma_bf16x3(acc[2 * np], ah, al, bh, bl, 0);
          mma_bf16x3(acc[2 * np + 1], ah, al, bh, bl, 1);
        }
      }
      const int64_t ob = b * p.out_stride[0] + hv * p.out_stride[2] + v0;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = half ? r1 : r0;
        if (r >= rec.len || !write_out) continue;
        const int64_t rb_ = ob + (rec.start + r) * p.out_stride[1];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const int col = cw + 8 * nt + 2 * tig;
          const float x0 = p.scale * acc[nt][2 * half], x1 = p.scale * acc[nt][2 * half + 1];
          if (p.out_dtype == KDA_DTYPE_BFLOAT16)
            *reinterpret_cast<__nv_bfloat162*>(static_cast<bf16*>(p.out) + rb_ + col) = __floats2bfloat162_rn(x0, x1);
          else if (p.out_dtype == KDA_DTYPE_FLOAT16)
            *reinterpret_cast<__half2*>(static_cast<__half*>(p.out) + rb_ + col) = __floats2half2_rn(x0, x1);
          else
            *reinterpret_cast<float2*>(static_cast<float*>(p.out) + rb_ + col) = make_float2(x0, x1);
        }
      }
    }
  }

  // Every read of initial_state by this CTA happened before the first barrier and no other CTA touches these
  // entries, so final_state may alias initial_state. (Each thread writes the entries it read.)
  cp_async_wait<0>();
  if (chain && seg_end != nullptr) {
    for_each_tile_element<NT3>(sv, dn0, tig, [&](int nt, int e, int v, int d) {
      seg_end[int64_t{v0 + v} * K + d] = S[nt][e];
    });
  } else if (chain && p.has_final_state() && role.end == SegmentRole::kFinal) {
    for_each_tile_element<NT3>(sv, dn0, tig, [&](int nt, int e, int v, int d) {
      static_cast<float*>(p.final_state)[p.state_offset(p.final_state_stride, n, hv, v0 + v, d)] = S[nt][e];
    });
  }
}

template <int K, int BV>
cudaError_t launch(const ForwardParams& p, const char* ws, int64_t chain0, int64_t chains, cudaStream_t s,
                   const BackwardSaves& keep, const SegmentArgs& sg = {}) {
  const size_t bytes = StateLayout<K, BV>::kBytes;
  const bool seg = sg.segments > 1;
  auto* const kernel = seg ? state_kernel<K, BV, true> : state_kernel<K, BV, false>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (e != cudaSuccess) return e;
  const int vtiles = p.V / BV;
  const int64_t per = seg ? segment_pass_ctas(sg.pass, sg.segments, BV, p.V, K) : vtiles;
  kernel<<<static_cast<unsigned>(chains * per), kThreads, bytes, s>>>(p, ws, vtiles, chain0, keep, sg);
  return cudaSuccess;
}

}  // namespace

size_t state_smem_bytes(int K, int bv) {
  return dispatch_kn<64, 32>(K, bv, [](auto k, auto v) {
    return StateLayout<decltype(k)::value, decltype(v)::value>::kBytes;
  });
}

cudaError_t launch_state_chains(const ForwardParams& p, const char* ws, int bv, int64_t chain0, int64_t count,
                                cudaStream_t s, const BackwardSaves& keep) {
  if (state_wgmma_runs(p, bv)) return launch_state_wgmma(p, ws, chain0, count, s, keep);
  return dispatch_kn<64, 32>(p.K, bv, [&](auto k, auto v) {
    return launch<decltype(k)::value, decltype(v)::value>(p, ws, chain0, count, s, keep);
  });
}

cudaError_t launch_state_segment_pass(const ForwardParams& p, const char* ws, int bv, const SegmentArgs& sg,
                                      cudaStream_t s) {
  if (state_wgmma_runs(p, bv)) return launch_state_wgmma_segment_pass(p, ws, sg, s);
  return dispatch_kn<64, 32>(p.K, bv, [&](auto k, auto v) {
    return launch<decltype(k)::value, decltype(v)::value>(p, ws, 0, p.N * p.HV, s, BackwardSaves{}, sg);
  });
}

cudaError_t launch_state(const ForwardParams& p, const char* ws, const StatePassPlan& plan, cudaStream_t s,
                         const BackwardSaves& keep) {
  const int64_t chains = p.N * p.HV;
  cudaError_t e = launch_state_chains(p, ws, plan.bv_first, 0, plan.first_chains, s, keep);
  if (e != cudaSuccess || plan.first_chains >= chains) return e;
  if ((e = cudaGetLastError()) != cudaSuccess) return e;
  return launch_state_chains(p, ws, plan.bv_rest, plan.first_chains, chains - plan.first_chains, s, keep);
}

}  // namespace kda::cuda::chunk
