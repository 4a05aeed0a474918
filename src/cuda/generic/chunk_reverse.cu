// chunk_reverse.cu: the chunked backward's reverse state pass (docs/backward.md, kernel 2): the only serial chain of
// the backward, the mirror of the forward's state pass (chunk_state.cu). One CTA of 256 threads (8 warps) per
// (sequence n, value head hv, V tile of BV columns); it walks the sequence's chunks from the last with its BV x K
// slice of dS (the gradient of the state at the current chunk's end) in registers, and per chunk, from phase 1's
// tiles (W, Qg, Kd, A_qk, decay) and dO' = scale dO:
//   0  dS -> workspace dsend (bf16 planes; the products kernel reads them)
//   A  dU = A_qk^T dO' + Kd dS^T                             [64 x BV]  -> -dU's planes to smem and workspace du
//   B  dS = dS diag(decay) + dO'^T Qg - dU^T W               [BV x K]   (registers, then the split smem copy)
// which is the forward's V_new = U - W S^T, o = scale (Qg S^T + A_qk V_new), S' = S diag(decay) + V_new^T Kd run
// backwards. It starts from dfinal_state (or zeros) and ends with the gradient of the initial state (dh0).
//
// Precision: as the forward's state pass, every product is bf16x3 on mma.m16n8k16 (both operands as hi / lo bf16
// planes, fp32 accumulation) and dS itself is accumulated in fp32 registers; phase 1's tiles are already split.
//
// Loads: two cp.async groups per chunk, {Kd, A_qk} for step A and {Qg, W, decay} for step B, each issued as soon as
// the previous chunk has finished with its buffers and waited for (wait_group 1) just before its step; dO is read
// with plain loads (all of a thread's issued first, then converted, scaled and split) at the top of each chunk. At
// the top of each chunk the CTA also asks L2 for its share of the previous chunk's tiles (TileShareL2) and dO rows:
// phase 1 wrote the tiles long before, so most are out of L2 when a chain reaches them.
//
// Shared memory (K = 128, BV = 64): planes of W, Qg, Kd [64][K + 8], of dS [BV][K + 8], A_qk [64][72], dO' and -dU
// [64][BV + 8]; decay [K]: 195,072 bytes, one CTA per SM. Registers: dS's tile as the forward's state tile.
#include <climits>
#include <cstdint>

#include "cuda/device_common.cuh"
#include "cuda/generic/chunk_common.cuh"
#include "cuda/generic/chunk_kernels.h"
#include "cuda/generic/chunk_map.h"
#include "cuda/generic/mma_layout.h"

namespace kda::cuda::chunk {
namespace {

constexpr int kThreads = 256;
constexpr int kC = kChunk;
using bf16 = __nv_bfloat16;

// Byte offsets of the shared-memory buffers; a plane pair is the hi plane followed by the lo plane.
template <int K, int BV>
struct ReverseLayout {
  static constexpr int PK = K + 8;   // W, Qg, Kd, dS planes (bf16 elements per row)
  static constexpr int PA = kC + 8;  // A_qk planes
  static constexpr int PV = BV + 8;  // dO' and -dU planes
  static constexpr int kRowPlane = kC * PK, kSPlane = BV * PK, kAPlane = kC * PA, kVPlane = kC * PV;  // elements
  static constexpr size_t kW = 0, kQ = kW + 4 * kRowPlane, kKd = kQ + 4 * kRowPlane, kS = kKd + 4 * kRowPlane;
  static constexpr size_t kA = kS + 4 * kSPlane, kO = kA + 4 * kAPlane, kU = kO + 4 * kVPlane;
  static constexpr size_t kDec = kU + 4 * kVPlane;
  static constexpr size_t kBytes = kDec + 4 * K;
};

template <int K, int BV>
__global__ void __launch_bounds__(kThreads, 1) reverse_kernel(const BackwardParams bp, char* ws, int vtiles,
                                                                int64_t chain0) {
  using Ly = ReverseLayout<K, BV>;
  constexpr int PK = Ly::PK, PA = Ly::PA, PV = Ly::PV;
  const ForwardParams& p = bp.f;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* const Wh = reinterpret_cast<bf16*>(smem + Ly::kW);
  bf16* const Qh = reinterpret_cast<bf16*>(smem + Ly::kQ);
  bf16* const Kh = reinterpret_cast<bf16*>(smem + Ly::kKd);
  bf16* const Sh = reinterpret_cast<bf16*>(smem + Ly::kS);
  bf16* const Ah = reinterpret_cast<bf16*>(smem + Ly::kA);
  bf16* const Oh = reinterpret_cast<bf16*>(smem + Ly::kO);
  bf16* const Uh = reinterpret_cast<bf16*>(smem + Ly::kU);
  float* const dec = reinterpret_cast<float*>(smem + Ly::kDec);
  const bf16* const Wl = Wh + Ly::kRowPlane;
  const bf16* const Ql = Qh + Ly::kRowPlane;
  const bf16* const Kl = Kh + Ly::kRowPlane;
  const bf16* const Sl = Sh + Ly::kSPlane;
  const bf16* const Al = Ah + Ly::kAPlane;
  const bf16* const Ol = Oh + Ly::kVPlane;
  const bf16* const Ul = Uh + Ly::kVPlane;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int grp = lane >> 2, tig = lane & 3;
  const ChainTile ct = chain_tile(blockIdx.x, vtiles, chain0, BV, p.HV);
  const int hv = ct.hv, vt = ct.vt, v0 = ct.v0;
  const int V = p.V;

  const BackwardLayout bl = backward_layout(p.B, p.T, p.N, p.HV, K, V, p.group);
  const WorkspaceLayout& wl = bl.fwd;
  const ChainChunks cc = chain_chunks(ws, wl, ct.rank, p.has_cu_seqlens());
  const int64_t n = cc.n;
  const ChunkRec* const list = cc.list;
  const float* const tiles = cc.tiles;
  const int64_t first = cc.first, last = cc.last, b = cc.b;
  const TileLayout tl{K, V};
  bf16* const du_g = reinterpret_cast<bf16*>(ws + bl.du);  // planes of -dU [2][C][V] a task
  bf16* const dsend_g = reinterpret_cast<bf16*>(ws + bl.dsend);  // planes of dS [2][V][K] a task

  // The two load groups of chunk ci (every thread commits each group, empty or not, so the counts agree).
  auto tile_of = [&](int64_t ci) { return tiles + (ci * p.HV + hv) * tl.floats(); };
  const TileShareL2<kThreads> share(tl, vt, vtiles);
  auto load_a = [&](int64_t ci) {
    if (ci >= first) {
      const float* t = tile_of(ci);
      load_planes<kThreads, kC, K, PK>(Kh, reinterpret_cast<const bf16*>(t + tl.Kd()), tid);
      load_planes<kThreads, kC, kC, PA>(Ah, reinterpret_cast<const bf16*>(t + tl.Aqk()), tid);
    }
    cp_async_commit();
  };
  auto load_b = [&](int64_t ci) {
    if (ci >= first) {
      const float* t = tile_of(ci);
      load_planes<kThreads, kC, K, PK>(Qh, reinterpret_cast<const bf16*>(t + tl.Qg()), tid);
      load_planes<kThreads, kC, K, PK>(Wh, reinterpret_cast<const bf16*>(t + tl.W()), tid);
      for (int e = tid; e < K / 4; e += kThreads) cp_async16(dec + 4 * e, t + tl.decay() + 4 * e);
    }
    cp_async_commit();
  };
  load_a(last - 1);
  load_b(last - 1);

  const LdsmRow ra = ldsm_a_rowmajor(lane), rat = ldsm_a_kmajor(lane), rb = ldsm_b_nmajor(lane),
                rbt = ldsm_b_kmajor(lane);
  // Step A: warp = rows 16 m .. (4 row tiles), columns (BV / 2) nh2 .. (NT = BV / 16 n-tiles of 8).
  constexpr int NT = BV / 16;
  const int m = warp & 3, nh2 = warp >> 2;
  const int r0 = 16 * m + grp, r1 = r0 + 8, cw = (BV / 2) * nh2;
  // Step B: warp = dS rows 16 mv .. (BV / 16 row tiles), columns dn0 .. (K / NSPLIT, NT3 n-tiles of 8).
  constexpr int MT = BV / 16, NSPLIT = 8 / MT, NT3 = K / (8 * NSPLIT);
  const int mv = warp % MT, dn0 = (warp / MT) * (K / NSPLIT);
  const int sv = 16 * mv + grp;  // this lane's dS rows sv, sv + 8; columns dn0 + 8 nt + 2 tig, +1

  float dS[NT3][4];
  for_each_tile_element<NT3>(sv, dn0, tig, [&](int nt, int e, int v, int d) {
    dS[nt][e] = bp.dfinal.data
                    ? static_cast<const float*>(bp.dfinal.data)[p.state_offset(bp.dfinal.stride, n, hv, v0 + v, d)]
                    : 0.0f;
  });
  auto store_state_planes = [&] {
#pragma unroll
    for (int nt = 0; nt < NT3; ++nt) {
      const int d = dn0 + 8 * nt + 2 * tig;
      store_split2(Sh, Ly::kSPlane, sv * PK + d, dS[nt][0], dS[nt][1]);
      store_split2(Sh, Ly::kSPlane, (sv + 8) * PK + d, dS[nt][2], dS[nt][3]);
    }
  };
  store_state_planes();

  // dS += A^T B over the chunk's 64 tokens for this warp's step-B tile: A [token][v] planes (pitch PV, the columns
  // of this warp's dS rows), B [token][d] planes (pitch PK).
  auto add_t_product = [&](const bf16* Ah_, const bf16* Al_, const bf16* Bh_, const bf16* Bl_) {
    mma_kmajor_kmajor<NT3>(dS, Ah_, Al_, PV, 16 * mv, Bh_, Bl_, PK, dn0, 0, kC / 16, rat.row, rat.col, rbt.row, rbt.col);
  };

#pragma unroll 1
  for (int64_t ci = last - 1; ci >= first; --ci) {
    const ChunkRec rec = list[ci];
    if (ci > first) {  // the previous chunk's tile and this CTA's BV columns of its dO rows, one row a thread
      share.prefetch(tile_of(ci - 1), tid);
      const ChunkRec& prev = list[ci - 1];
      if (tid < prev.len) prefetch_row_l2(bp.dout, b, prev.start + tid, hv, v0, BV);
    }

    // ---- 0: dS (this chunk's end) to the workspace, value-first planes [2][V][K].
    {
      bf16* const ds = dsend_g + (ci * p.HV + hv) * 2 * int64_t{V} * K;
#pragma unroll
      for (int nt = 0; nt < NT3; ++nt) {
        const int d = dn0 + 8 * nt + 2 * tig;
        store_split2(ds, int64_t{V} * K, int64_t{v0 + sv} * K + d, dS[nt][0], dS[nt][1]);
        store_split2(ds, int64_t{V} * K, int64_t{v0 + sv + 8} * K + d, dS[nt][2], dS[nt][3]);
      }
    }
    // dO' = scale dO of the chunk's rows (zeros past its length), split into planes [token][v].
    {
      DoutPairs<kThreads, BV> dout(tid);
      dout.load(bp.dout, rec, b, hv, v0);
      dout.store(bp.dout.dtype, p.scale, rec.len,
                 [&](int, int r, int c, float x0, float x1) { store_split2(Oh, Ly::kVPlane, r * PV + c, x0, x1); });
    }

    // ---- A: dU = A_qk^T dO' + Kd dS^T. A_qk^T: the A_qk planes [r][t] are k-major for A = [t][r] (trans); it is
    // upper triangular (A_qk lower), so the k-steps start at the diagonal block. dO' [r][v] is k-major (trans).
    // Kd [t][d] row-major against dS^T: the dS planes [v][d] are n-major.
    cp_async_wait<1>();
    __syncthreads();  // Kd, A_qk of this chunk; dO' planes; the dS planes of the previous step
    {
      float acc[NT][4];
      mma_times_state_t<NT, K>(acc, Kh, Kl, Sh, Sl, PK, 16 * m, cw, ra.row, ra.col, rb.row, rb.col);
      mma_kmajor_kmajor<NT>(acc, Ah, Al, PA, 16 * m, Oh, Ol, PV, cw, m, kC / 16, rat.row, rat.col, rbt.row, rbt.col);
      bf16* const du = du_g + (ci * p.HV + hv) * 2 * int64_t{kC} * V + v0;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const int col = cw + 8 * nt + 2 * tig;
        uint32_t h0, l0, h1, l1;  // -dU's planes: in shared memory for step B, in the workspace for the products
        split_bf16x2(-acc[nt][0], -acc[nt][1], h0, l0);
        split_bf16x2(-acc[nt][2], -acc[nt][3], h1, l1);
        store_planes2(Uh, Ly::kVPlane, r0 * PV + col, h0, l0);
        store_planes2(Uh, Ly::kVPlane, r1 * PV + col, h1, l1);
        store_planes2(du, int64_t{kC} * V, r0 * V + col, h0, l0);
        store_planes2(du, int64_t{kC} * V, r1 * V + col, h1, l1);
      }
    }
    __syncthreads();  // -dU complete; Kd, A_qk free; every read of the dS planes done
    load_a(ci - 1);

    // ---- B: dS = dS diag(decay) + dO'^T Qg + (-dU)^T W.
    cp_async_wait<1>();
    __syncthreads();  // Qg, W, decay of this chunk
    {
#pragma unroll
      for (int nt = 0; nt < NT3; ++nt) {
        const int d = dn0 + 8 * nt + 2 * tig;
        const float f0 = dec[d], f1 = dec[d + 1];
        dS[nt][0] *= f0;
        dS[nt][1] *= f1;
        dS[nt][2] *= f0;
        dS[nt][3] *= f1;
      }
      add_t_product(Oh, Ol, Qh, Ql);
      add_t_product(Uh, Ul, Wh, Wl);
      store_state_planes();
    }
    __syncthreads();  // Qg, W, decay, dO' and -dU free; the new dS planes written
    load_b(ci - 1);
  }

  cp_async_wait<0>();
  if (bp.dh0.data) {
    for_each_tile_element<NT3>(sv, dn0, tig, [&](int nt, int e, int v, int d) {
      store_out(bp.dh0.data, bp.dh0.dtype, p.state_offset(bp.dh0.stride, n, hv, v0 + v, d), dS[nt][e]);
    });
  }
}

template <int K, int BV>
cudaError_t launch(const BackwardParams& bp, char* ws, int64_t chain0, int64_t chains, cudaStream_t s) {
  const size_t bytes = ReverseLayout<K, BV>::kBytes;
  cudaError_t e = cudaFuncSetAttribute(reverse_kernel<K, BV>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(bytes));
  if (e != cudaSuccess) return e;
  const int vtiles = bp.f.V / BV;
  reverse_kernel<K, BV><<<static_cast<unsigned>(chains * vtiles), kThreads, bytes, s>>>(bp, ws, vtiles, chain0);
  return cudaSuccess;
}

}  // namespace

size_t reverse_smem_bytes(int K, int bv) {
  return dispatch_kn<64, 32>(K, bv, [](auto k, auto v) {
    return ReverseLayout<decltype(k)::value, decltype(v)::value>::kBytes;
  });
}

cudaError_t launch_reverse(const BackwardParams& bp, char* ws, const StatePassPlan& plan, cudaStream_t s) {
  const int64_t chains = bp.f.N * bp.f.HV;
  // One launch of the plan: chains chain0 .. chain0 + count - 1 in bv-column tiles, on wgmma where it runs.
  auto one = [&](int bv, int64_t chain0, int64_t count) {
    if (reverse_wgmma_runs(bp.f, bv)) return launch_reverse_wgmma(bp, ws, chain0, count, s);
    return dispatch_kn<64, 32>(bp.f.K, bv, [&](auto k, auto v) {
      return launch<decltype(k)::value, decltype(v)::value>(bp, ws, chain0, count, s);
    });
  };
  cudaError_t e = one(plan.bv_first, 0, plan.first_chains);
  if (e != cudaSuccess || plan.first_chains >= chains) return e;
  if ((e = cudaGetLastError()) != cudaSuccess) return e;
  return one(plan.bv_rest, plan.first_chains, chains - plan.first_chains);
}

}  // namespace kda::cuda::chunk
