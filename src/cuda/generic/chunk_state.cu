// chunk_state.cu: phase 2 of the two-phase chunked forward: the sequential state pass. One CTA of 256 threads
// (8 warps) per (sequence n, value head hv, V tile of BV columns, BV in {32, 64} chosen at run time by
// choose_v_tile so the grid fills the GPU). The CTA walks its sequence's chunks (the chunk list of chunk_map.h) in
// order with its BV x K slice of the fp32 state on chip, and per chunk, from phase 1's tiles (chunk_prepare.cu):
//   1  V_new = U - W S^T                                   [64 x BV]   -> smem
//   2  o = scale (Qg S^T + A_qk V_new), stored in the output dtype for the chunk's L rows
//   3  S = S diag(decay) + V_new^T Kd                      [BV x K]    (registers, then the smem mirror)
// The state is loaded from initial_state (either layout, or zeros) and written to final_state (either layout).
//
// Precision: mma.sync m16n8k8 with fp32 accumulation; the state is only ever accumulated in fp32. W S^T (step 1),
// A_qk V_new (step 2) and V_new^T Kd (step 3) are 3xTF32 (mma3 of chunk_common.cuh: both operands split, ~21
// bits); Qg S^T (step 2) is single tf32. Why: with near-identical keys and beta near 1 or 2, V_new = U - W S^T is a
// small difference of large terms, and the chunk's V_new rows are large and cancel in V_new^T Kd and A_qk V_new
// (the keys are nearly the same); one tf32 rounding (2^-11) of those products' operands leaves state errors past the
// tensor-core bound 2^-9 and output elements past theirs. The CPU model of this path's rounding
// (scripts/models/two_phase.py through kda-verify --suite full, seeds 1-2) gives, tf32 everywhere -> this choice:
// final-state relative RMSE stress_near_identical_keys 3.20e-3 -> 1.2e-6, stress_beta_at_2_negative_eigenvalues
// 3.11e-3 -> 3.1e-6 (the H200 measured 3.30e-3 and 3.08e-3 with tf32 everywhere); the worst output element of
// stress_near_identical_keys (seed 2) 1.25 -> 0.16 of its bound (1.24 with A_qk V_new left in tf32). Not enough:
// step 3 alone (beta = 2 at 2.07e-3), step 1 alone (2.33e-3), one split operand per product (two mma, 1.6e-3 to
// 2.1e-3). Phase 1's products at fp64 change nothing; Qg S^T in 3xTF32 would move the output RMSE only (bf16
// rounding dominates it). Cost: mma per chunk per CTA (K = 128) 1696 -> 4064 at BV = 64, 848 -> 2032 at BV = 32.
// Unmeasured on the GPU as of this change (no timing, no kda-verify run of this build).
//
// Loads overlap the math: the chunk's tiles come in three cp.async groups, each issued as soon as the previous
// chunk has finished with its buffer and waited for just before its own step: {W, U} (step 1), {Qg, A_qk} (step 2),
// {Kd, decay} (step 3). So each group loads behind the other two steps. Waiting for "all but the two most recent
// groups" (cp.async.wait_group 2) before each step is exactly the group that step needs.
//
// Shared memory (K = 128, BV = 64): W, Qg [64][132], Kd [64][136], U, V_new [64][BV + 8], A_qk [64][68], decay [K],
// state mirror [BV][132]: 190,976 bytes, one CTA per SM (BV = 32: 157,696). Two CTAs per SM would need <= 113 KB;
// only K = 64 with BV = 32 (100,096) gets there. Pitches: buffers read as A operands or transposed B operands have a
// pitch = 4 (mod 32) words, plain (k-major) B operands 8 (mod 32): conflict-free fragment loads.
// Registers: step 2's accumulator 4 x 4, step 3's state tile K / 16 x 4 = 32 (BV = 64) or K / 32 x 4 (BV = 32).
#include <climits>
#include <cstdint>

#include "cuda/device_common.cuh"
#include "cuda/generic/chunk_common.cuh"
#include "cuda/generic/chunk_kernels.h"
#include "cuda/generic/chunk_map.h"

namespace kda::cuda::chunk {
namespace {

constexpr int kThreads = 256;
constexpr int kC = kChunk;

template <int K, int BV>
struct StateLayout {
  static constexpr int PK = K + 4;    // W, Qg, state mirror
  static constexpr int PD = K + 8;    // Kd (plain B operand)
  static constexpr int PV = BV + 8;   // U, V_new (V_new: plain B operand and transposed A operand)
  static constexpr int PA = kC + 4;   // A_qk
  static constexpr int kW = 0, kQ = kW + kC * PK, kKd = kQ + kC * PK, kU = kKd + kC * PD, kA = kU + kC * PV;
  static constexpr int kDec = kA + kC * PA, kS = kDec + K, kVn = kS + BV * PK;
  static constexpr int kFloats = kVn + kC * PV;
  static constexpr size_t kBytes = sizeof(float) * kFloats;
};

template <int K, int BV>
__global__ void __launch_bounds__(kThreads, 1) state_kernel(const ForwardParams p, const char* ws, int vtiles) {
  using Ly = StateLayout<K, BV>;
  constexpr int PK = Ly::PK, PD = Ly::PD, PV = Ly::PV, PA = Ly::PA;
  extern __shared__ __align__(16) float smem[];
  float* const Ws = smem + Ly::kW;
  float* const Qs = smem + Ly::kQ;
  float* const Kds = smem + Ly::kKd;
  float* const Us = smem + Ly::kU;
  float* const As = smem + Ly::kA;
  float* const dec = smem + Ly::kDec;
  float* const Ss = smem + Ly::kS;
  float* const Vn = smem + Ly::kVn;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int grp = lane >> 2, tig = lane & 3;
  const int vt = static_cast<int>(blockIdx.x % vtiles);
  const int64_t nh = blockIdx.x / vtiles;
  const int hv = static_cast<int>(nh % p.HV);
  const int64_t n = nh / p.HV;
  const int v0 = vt * BV;
  const int V = p.V;

  const WorkspaceLayout wl = workspace_layout(p.B * p.T, p.N, p.HV, K, V);
  const int64_t* const seq_first = reinterpret_cast<const int64_t*>(ws + wl.seq_first);
  const ChunkRec* const list = reinterpret_cast<const ChunkRec*>(ws + wl.list);
  const TileLayout tl{K, V};
  const float* const tiles = reinterpret_cast<const float*>(ws + wl.tiles);
  const int64_t first = seq_first[n], last = seq_first[n + 1];
  const int64_t b = p.has_cu_seqlens() ? 0 : n;

  // The state mirror [BV][K + 4] (value-first whatever the tensors' layout).
  for (int e = tid; e < BV * K; e += kThreads) {
    const int v = e / K, d = e % K;
    Ss[v * PK + d] = p.has_initial_state()
                         ? static_cast<const float*>(p.initial_state.data)[p.state_offset(p.initial_state.stride, n, hv,
                                                                                           v0 + v, d)]
                         : 0.0f;
  }

  // The three load groups of chunk ci (every thread commits each group, empty or not, so the counts agree).
  auto tile_of = [&](int64_t ci) { return tiles + (ci * p.HV + hv) * tl.floats(); };
  auto load_wu = [&](int64_t ci) {
    if (ci < last) {
      const float* t = tile_of(ci);
      for (int e = tid; e < kC * K / 4; e += kThreads) {
        const int r = e / (K / 4), c = 4 * (e % (K / 4));
        cp_async16(Ws + r * PK + c, t + tl.W() + r * K + c);
      }
      for (int e = tid; e < kC * BV / 4; e += kThreads) {
        const int r = e / (BV / 4), c = 4 * (e % (BV / 4));
        cp_async16(Us + r * PV + c, t + tl.U() + int64_t{r} * V + v0 + c);
      }
    }
    cp_async_commit();
  };
  auto load_qa = [&](int64_t ci) {
    if (ci < last) {
      const float* t = tile_of(ci);
      for (int e = tid; e < kC * K / 4; e += kThreads) {
        const int r = e / (K / 4), c = 4 * (e % (K / 4));
        cp_async16(Qs + r * PK + c, t + tl.Qg() + r * K + c);
      }
      for (int e = tid; e < kC * kC / 4; e += kThreads) {
        const int r = e / (kC / 4), c = 4 * (e % (kC / 4));
        cp_async16(As + r * PA + c, t + tl.Aqk() + r * kC + c);
      }
    }
    cp_async_commit();
  };
  auto load_kd = [&](int64_t ci) {
    if (ci < last) {
      const float* t = tile_of(ci);
      for (int e = tid; e < kC * K / 4; e += kThreads) {
        const int r = e / (K / 4), c = 4 * (e % (K / 4));
        cp_async16(Kds + r * PD + c, t + tl.Kd() + r * K + c);
      }
      for (int e = tid; e < K / 4; e += kThreads) cp_async16(dec + 4 * e, t + tl.decay() + 4 * e);
    }
    cp_async_commit();
  };
  load_wu(first);
  load_qa(first);
  load_kd(first);

  // Steps 1 and 2: warp = rows 16 m .. (4 row tiles), columns (BV / 2) nh2 .. (BV / 16 n-tiles of 8).
  constexpr int NT = BV / 16;
  const int m = warp & 3, nh2 = warp >> 2;
  const int r0 = 16 * m + grp, r1 = r0 + 8;
  // Step 3: warp = state rows 16 mv .. (BV / 16 row tiles), columns dn0 .. (K / NSPLIT, NT3 n-tiles of 8).
  constexpr int MT = BV / 16, NSPLIT = 8 / MT, NT3 = K / (8 * NSPLIT);
  const int mv = warp % MT, dn0 = (warp / MT) * (K / NSPLIT);

#pragma unroll 1
  for (int64_t ci = first; ci < last; ++ci) {
    const ChunkRec rec = list[ci];

    // ---- 1: V_new = U - W S^T (3xTF32: see the header).
    cp_async_wait<2>();
    __syncthreads();  // W, U of this chunk; the state mirror of the previous chunk
    {
      float acc[NT][4];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[nt][e] = 0.0f;
#pragma unroll 4
      for (int ks = 0; ks < K / 8; ++ks) {
        const int c0 = 8 * ks + tig, c1 = c0 + 4;
        uint32_t ah[4], al[4];
        split(Ws[r0 * PK + c0], ah[0], al[0]);
        split(Ws[r1 * PK + c0], ah[1], al[1]);
        split(Ws[r0 * PK + c1], ah[2], al[2]);
        split(Ws[r1 * PK + c1], ah[3], al[3]);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const int nn = (BV / 2) * nh2 + 8 * nt + grp;
          uint32_t bh[2], bl[2];
          split(Ss[nn * PK + c0], bh[0], bl[0]);
          split(Ss[nn * PK + c1], bh[1], bl[1]);
          mma3(acc[nt], ah, al, bh, bl);
        }
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const int col = (BV / 2) * nh2 + 8 * nt + 2 * tig;
        const float2 u0 = *reinterpret_cast<const float2*>(Us + r0 * PV + col);
        const float2 u1 = *reinterpret_cast<const float2*>(Us + r1 * PV + col);
        *reinterpret_cast<float2*>(Vn + r0 * PV + col) = make_float2(u0.x - acc[nt][0], u0.y - acc[nt][1]);
        *reinterpret_cast<float2*>(Vn + r1 * PV + col) = make_float2(u1.x - acc[nt][2], u1.y - acc[nt][3]);
      }
    }
    __syncthreads();  // V_new complete; W and U free
    load_wu(ci + 1);

    // ---- 2: o = scale (Qg S^T + tril(A_qk) V_new).
    cp_async_wait<2>();
    __syncthreads();  // Qg, A_qk of this chunk
    {
      float acc[NT][4];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[nt][e] = 0.0f;
#pragma unroll 4
      for (int ks = 0; ks < K / 8; ++ks) {
        const int c0 = 8 * ks + tig, c1 = c0 + 4;
        const uint32_t a[4] = {tf32(Qs[r0 * PK + c0]), tf32(Qs[r1 * PK + c0]), tf32(Qs[r0 * PK + c1]),
                               tf32(Qs[r1 * PK + c1])};
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const int nn = (BV / 2) * nh2 + 8 * nt + grp;
          const uint32_t bb[2] = {tf32(Ss[nn * PK + c0]), tf32(Ss[nn * PK + c1])};
          mma(acc[nt], a, bb);
        }
      }
      // A_qk is lower triangular (upper zeros): the k-steps stop at the diagonal block. 3xTF32: see the header.
      for (int ks = 0; ks < 2 * (m + 1); ++ks) {
        const int c0 = 8 * ks + tig, c1 = c0 + 4;
        uint32_t ah[4], al[4];
        split(As[r0 * PA + c0], ah[0], al[0]);
        split(As[r1 * PA + c0], ah[1], al[1]);
        split(As[r0 * PA + c1], ah[2], al[2]);
        split(As[r1 * PA + c1], ah[3], al[3]);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const int nn = (BV / 2) * nh2 + 8 * nt + grp;
          uint32_t bh[2], bl[2];
          split(Vn[c0 * PV + nn], bh[0], bl[0]);
          split(Vn[c1 * PV + nn], bh[1], bl[1]);
          mma3(acc[nt], ah, al, bh, bl);
        }
      }
      const int64_t ob = b * p.out_stride[0] + hv * p.out_stride[2] + v0;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = half ? r1 : r0;
        if (r >= rec.len) continue;
        const int64_t rb = ob + (rec.start + r) * p.out_stride[1];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const int col = (BV / 2) * nh2 + 8 * nt + 2 * tig;
          const float x0 = p.scale * acc[nt][2 * half], x1 = p.scale * acc[nt][2 * half + 1];
          if (p.out_dtype == KDA_DTYPE_BFLOAT16)
            *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(p.out) + rb + col) =
                __floats2bfloat162_rn(x0, x1);
          else if (p.out_dtype == KDA_DTYPE_FLOAT16)
            *reinterpret_cast<__half2*>(static_cast<__half*>(p.out) + rb + col) = __floats2half2_rn(x0, x1);
          else
            *reinterpret_cast<float2*>(static_cast<float*>(p.out) + rb + col) = make_float2(x0, x1);
        }
      }
    }
    __syncthreads();  // Qg, A_qk free; every read of the state mirror by steps 1-2 done
    load_qa(ci + 1);

    // ---- 3: S = S diag(decay) + V_new^T Kd (the state in registers only here; 3xTF32: see the header).
    cp_async_wait<2>();
    __syncthreads();  // Kd, decay of this chunk
    {
      float S[NT3][4];
#pragma unroll
      for (int nt = 0; nt < NT3; ++nt) {
        const int v = 16 * mv + grp, d = dn0 + 8 * nt + 2 * tig;
        const float2 lo = *reinterpret_cast<const float2*>(Ss + v * PK + d);
        const float2 hi = *reinterpret_cast<const float2*>(Ss + (v + 8) * PK + d);
        const float f0 = dec[d], f1 = dec[d + 1];
        S[nt][0] = lo.x * f0;
        S[nt][1] = lo.y * f1;
        S[nt][2] = hi.x * f0;
        S[nt][3] = hi.y * f1;
      }
#pragma unroll 2
      for (int ks = 0; ks < kC / 8; ++ks) {
        const int k0 = 8 * ks + tig, k1 = k0 + 4;
        const int va = 16 * mv + grp;
        uint32_t ah[4], al[4];
        split(Vn[k0 * PV + va], ah[0], al[0]);
        split(Vn[k0 * PV + va + 8], ah[1], al[1]);
        split(Vn[k1 * PV + va], ah[2], al[2]);
        split(Vn[k1 * PV + va + 8], ah[3], al[3]);
#pragma unroll
        for (int nt = 0; nt < NT3; ++nt) {
          const int dd = dn0 + 8 * nt + grp;
          uint32_t bh[2], bl[2];
          split(Kds[k0 * PD + dd], bh[0], bl[0]);
          split(Kds[k1 * PD + dd], bh[1], bl[1]);
          mma3(S[nt], ah, al, bh, bl);
        }
      }
#pragma unroll
      for (int nt = 0; nt < NT3; ++nt) {
        const int v = 16 * mv + grp, d = dn0 + 8 * nt + 2 * tig;
        *reinterpret_cast<float2*>(Ss + v * PK + d) = make_float2(S[nt][0], S[nt][1]);
        *reinterpret_cast<float2*>(Ss + (v + 8) * PK + d) = make_float2(S[nt][2], S[nt][3]);
      }
    }
    __syncthreads();  // Kd, decay and V_new free; the new state in the mirror
    load_kd(ci + 1);
  }

  // Every read of initial_state by this CTA happened before the first barrier and no other CTA touches these
  // entries, so final_state may alias initial_state.
  cp_async_wait<0>();
  __syncthreads();
  if (p.has_final_state())
    for (int e = tid; e < BV * K; e += kThreads) {
      const int v = e / K, d = e % K;
      static_cast<float*>(p.final_state)[p.state_offset(p.final_state_stride, n, hv, v0 + v, d)] = Ss[v * PK + d];
    }
}

template <int K, int BV>
cudaError_t launch(const ForwardParams& p, const char* ws, cudaStream_t s) {
  const size_t bytes = StateLayout<K, BV>::kBytes;
  cudaError_t e =
      cudaFuncSetAttribute(state_kernel<K, BV>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (e != cudaSuccess) return e;
  const int vtiles = p.V / BV;
  state_kernel<K, BV><<<static_cast<unsigned>(p.N * p.HV * vtiles), kThreads, bytes, s>>>(p, ws, vtiles);
  return cudaSuccess;
}

}  // namespace

size_t state_smem_bytes(int K, int bv) {
  if (K == 64) return bv == 64 ? StateLayout<64, 64>::kBytes : StateLayout<64, 32>::kBytes;
  return bv == 64 ? StateLayout<128, 64>::kBytes : StateLayout<128, 32>::kBytes;
}

cudaError_t launch_state(const ForwardParams& p, const char* ws, int bv, cudaStream_t s) {
  if (p.K == 64) return bv == 64 ? launch<64, 64>(p, ws, s) : launch<64, 32>(p, ws, s);
  return bv == 64 ? launch<128, 64>(p, ws, s) : launch<128, 32>(p, ws, s);
}

}  // namespace kda::cuda::chunk
