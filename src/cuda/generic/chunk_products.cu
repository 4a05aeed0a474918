// chunk_products.cu: the chunked backward's products (docs/backward.md; launch 4 of backward_chunked.cu): per
// (chunk, value head), the matrix products of the gradient pass, from the saved forward quantities (BackwardLayout:
// T, S0, V_new; phase 1's U0 and W tiles) and the reverse pass's dU and chunk-end dS, into the task's product tiles
// (ProdLayout) that the per-channel pass (chunk_grad.cu) reads:
//   P1  dM = lower(dO' V_new^T), QS = dO' S0, KD = V_new dS, dW = -dU S0      (dO' = scale dO; inner dimension V)
//   P2  BV = T^T dU, BK = T^T dW                                            (inner dimension C)
//   P3  dA = -strictly_lower(BV U0^T + BK W^T)                              (inner dimension V, then K)
//   CS  colsum(S0 . dS): the coefficient of the whole chunk's decay in dg
// Why a kernel of its own: inside the per-channel pass these products ran at one 8-warp CTA per SM (that pass's 210 KB
// of shared memory), where their operand loads were exposed; here a CTA needs 45 KB and 128 registers per thread,
// so two CTAs share an SM and hide each other's loads. Same fp32 SIMT products, same summation order as before
// the split: the gradients are unchanged to the bit.
//
// Grid: one CTA of 256 threads per (chunk list entry, value head); entries past the list's length return at once.
// Shared memory: the GEMM staging (16 k-steps of A and B, padded) and dW [C][K] (P2's operand): 45,568 bytes at
// K = V = 128.
#include <climits>
#include <cstdint>

#include "cuda/device_common.cuh"
#include "cuda/generic/backward_common.cuh"  // load_f
#include "cuda/generic/chunk_common.cuh"
#include "cuda/generic/chunk_kernels.h"
#include "cuda/generic/chunk_map.h"

namespace kda::cuda::chunk {
namespace {

constexpr int kThreads = 256;
constexpr int kC = kChunk;

template <int K, int V>
struct ProdSmem {  // float offsets into shared memory
  static constexpr int W = K > V ? K : V;
  static constexpr int kAs = 0, kBs = kAs + 16 * (kC + 4), kDW = kBs + 16 * (W + 4);
  static constexpr size_t kBytes = sizeof(float) * (kDW + kC * K);
};

// acc (+)= A B for the block's 64 x N output, A = fa(row, k) [64 x kin], B = fb(k, col) [kin x N], kin a multiple
// of 16. Thread (tr, tc) = (tid / 16, tid % 16) owns rows 4 tr .. 4 tr + 3 and columns tc + 16 j. Operands are staged
// through shared memory 16 k-steps at a time, the next step's loaded into registers (4 + N / 16 per thread) while
// this one computes. A_T / B_T say the operand's source is contiguous in the row (A) or in k (B), so consecutive
// threads take consecutive source elements (coalesced) either way. Ends with a barrier, so the caller may restage
// right after.
template <int N, bool A_T, bool B_T, class FA, class FB>
__device__ __forceinline__ void block_gemm(float* As, float* Bs, int kin, FA fa, FB fb, float (&acc)[4][N / 16]) {
  constexpr int PA = kC + 4, PB = N + 4;
  constexpr int EA = 16 * kC / kThreads, EB = 16 * N / kThreads;
  static_assert(EA * kThreads == 16 * kC && EB * kThreads == 16 * N, "block_gemm: staging must tile the threads");
  const int tid = threadIdx.x, tr = tid >> 4, tc = tid & 15;
  // Element i of this thread's staging share: (row or col, kk) of the 16-step slice.
  auto a_at = [&](int i, int* r, int* kk) {
    const int e = tid + i * kThreads;
    *r = A_T ? e % kC : e >> 4;
    *kk = A_T ? e / kC : e & 15;
  };
  auto b_at = [&](int i, int* kk, int* c) {
    const int e = tid + i * kThreads;
    *kk = B_T ? e & 15 : e / N;
    *c = B_T ? e >> 4 : e % N;
  };
  float ra[EA], rb[EB];
  auto fetch = [&](int k0) {
#pragma unroll
    for (int i = 0; i < EA; ++i) {
      int r, kk;
      a_at(i, &r, &kk);
      ra[i] = fa(r, k0 + kk);
    }
#pragma unroll
    for (int i = 0; i < EB; ++i) {
      int kk, c;
      b_at(i, &kk, &c);
      rb[i] = fb(k0 + kk, c);
    }
  };
  fetch(0);
  for (int k0 = 0; k0 < kin; k0 += 16) {
#pragma unroll
    for (int i = 0; i < EA; ++i) {
      int r, kk;
      a_at(i, &r, &kk);
      As[kk * PA + r] = ra[i];
    }
#pragma unroll
    for (int i = 0; i < EB; ++i) {
      int kk, c;
      b_at(i, &kk, &c);
      Bs[kk * PB + c] = rb[i];
    }
    __syncthreads();
    if (k0 + 16 < kin) fetch(k0 + 16);
#pragma unroll 4
    for (int kk = 0; kk < 16; ++kk) {
      const float4 a = *reinterpret_cast<const float4*>(As + kk * PA + 4 * tr);
#pragma unroll
      for (int j = 0; j < N / 16; ++j) {
        const float bv = Bs[kk * PB + tc + 16 * j];
        acc[0][j] = fmaf(a.x, bv, acc[0][j]);
        acc[1][j] = fmaf(a.y, bv, acc[1][j]);
        acc[2][j] = fmaf(a.z, bv, acc[2][j]);
        acc[3][j] = fmaf(a.w, bv, acc[3][j]);
      }
    }
    __syncthreads();
  }
}

template <int N>
__device__ __forceinline__ void zero(float (&acc)[4][N / 16]) {
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < N / 16; ++j) acc[i][j] = 0.0f;
}

// Calls epi(row, col, value) for each of this thread's block_gemm outputs.
template <int N, class Epi>
__device__ __forceinline__ void for_each_out(const float (&acc)[4][N / 16], Epi epi) {
  const int tr = threadIdx.x >> 4, tc = threadIdx.x & 15;
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < N / 16; ++j) epi(4 * tr + i, tc + 16 * j, acc[i][j]);
}

__device__ __forceinline__ float bf16_at(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }

// 256 threads at 128 registers (ptxas, sm_90a: no spills; a cap of 80 for 3 CTAs per SM spills 100-700 bytes):
// two CTAs per SM, 16 warps, by registers; shared memory would allow four.
template <int K, int V>
__global__ void __launch_bounds__(kThreads, 2) products_kernel(const BackwardParams bp, char* ws) {
  using Ly = ProdSmem<K, V>;
  const ForwardParams& p = bp.f;
  extern __shared__ __align__(16) float smem[];
  float* const As = smem + Ly::kAs;
  float* const Bs = smem + Ly::kBs;
  float* const dWs = smem + Ly::kDW;  // -dU S0 [C][K]

  const int tid = threadIdx.x;
  const BackwardLayout bl = backward_layout(p.B, p.T, p.N, p.HV, K, V);
  const WorkspaceLayout& wl = bl.fwd;
  const int64_t count = *reinterpret_cast<const int64_t*>(ws);
  const int64_t task = blockIdx.x;
  const int64_t ci = task / p.HV;
  if (ci >= count) return;  // past the list: the per-channel pass skips these tasks too
  const int hv = static_cast<int>(task % p.HV);
  const ChunkRec rec = reinterpret_cast<const ChunkRec*>(ws + wl.list)[ci];
  const int L = rec.len;
  const int64_t b = p.has_cu_seqlens() ? 0 : rec.seq, t0 = rec.start;
  const TileLayout tl{K, V};
  const ProdLayout pl{K, V};
  const float* const S0 = reinterpret_cast<const float*>(ws + bl.starts) + task * int64_t{V} * K;
  const float* const dSe = reinterpret_cast<const float*>(ws + bl.dsend) + task * int64_t{V} * K;
  const float* const Vn = reinterpret_cast<const float*>(ws + bl.vnew) + task * int64_t{kC} * V;
  const float* const dU = reinterpret_cast<const float*>(ws + bl.du) + task * int64_t{kC} * V;
  const float* const Tm = reinterpret_cast<const float*>(ws + bl.tinv) + task * int64_t{kC} * kC;
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

  // ---- CS: colsum(S0 . dS) per channel (a thread per channel; consecutive channels: coalesced).
  if (tid < K) {
    float cs = 0.0f;
    for (int v = 0; v < V; ++v) cs = fmaf(S0[v * K + tid], dSe[v * K + tid], cs);
    out[pl.CS() + tid] = cs;
  }

  // ---- P1: the products with the state and V_new (inner dimension V). Rows past L of dO' are zeros.
  auto dOp = [&](int t, int v) {
    return t < L ? p.scale * load_f(dO.data, dO.dtype,
                                    b * dO.stride[0] + (t0 + t) * dO.stride[1] + hv * dO.stride[2] + v * dO.stride[3])
                 : 0.0f;
  };
  auto s0_at = [&](int v, int d) { return S0[v * K + d]; };
  {
    float acc[4][kC / 16];
    zero<kC>(acc);
    block_gemm<kC, false, true>(As, Bs, V, dOp, [&](int v, int c) { return Vn[c * V + v]; }, acc);
    for_each_out<kC>(acc, [&](int r, int c, float x) { dM[r * kC + c] = c <= r ? x : 0.0f; });
  }
  {
    float acc[4][K / 16];
    zero<K>(acc);
    block_gemm<K, false, false>(As, Bs, V, dOp, s0_at, acc);
    for_each_out<K>(acc, [&](int r, int c, float x) { QS[r * K + c] = x; });
    zero<K>(acc);
    block_gemm<K, false, false>(As, Bs, V, [&](int t, int v) { return Vn[t * V + v]; },
                                [&](int v, int d) { return dSe[v * K + d]; }, acc);
    for_each_out<K>(acc, [&](int r, int c, float x) { KD[r * K + c] = x; });
    zero<K>(acc);
    block_gemm<K, false, false>(As, Bs, V, [&](int t, int v) { return dU[t * V + v]; }, s0_at, acc);
    for_each_out<K>(acc, [&](int r, int c, float x) { dWs[r * K + c] = -x; });
  }
  __syncthreads();

  // ---- P2: BV = T^T dU, BK = T^T dW (T lower triangular: only its entries r >= t are read).
  auto tT = [&](int t, int r) { return r >= t ? Tm[r * kC + t] : 0.0f; };
  {
    float acc[4][V / 16];
    zero<V>(acc);
    block_gemm<V, true, false>(As, Bs, kC, tT, [&](int r, int v) { return dU[r * V + v]; }, acc);
    for_each_out<V>(acc, [&](int r, int c, float x) { BV[r * V + c] = x; });
  }
  {
    float acc[4][K / 16];
    zero<K>(acc);
    block_gemm<K, true, false>(As, Bs, kC, tT, [&](int r, int d) { return dWs[r * K + d]; }, acc);
    for_each_out<K>(acc, [&](int r, int c, float x) { BK[r * K + c] = x; });
  }
  __syncthreads();  // BV and BK (global, this CTA's own writes) are P3's operands

  // ---- P3: dA = -strictly_lower(BV U0^T + BK W^T); W from its bf16 hi / lo planes.
  {
    float acc[4][kC / 16];
    zero<kC>(acc);
    block_gemm<kC, false, true>(As, Bs, V, [&](int t, int v) { return BV[t * V + v]; },
                                [&](int v, int c) { return U0[c * V + v]; }, acc);
    block_gemm<kC, false, true>(As, Bs, K, [&](int t, int d) { return BK[t * K + d]; },
                                [&](int d, int c) { return bf16_at(Wp, c * K + d) + bf16_at(Wp, kC * K + c * K + d); },
                                acc);
    for_each_out<kC>(acc, [&](int r, int c, float x) { dA[r * kC + c] = c < r ? -x : 0.0f; });
  }
}

template <int K, int V>
cudaError_t launch(const BackwardParams& bp, char* ws, cudaStream_t s) {
  const size_t bytes = ProdSmem<K, V>::kBytes;
  cudaError_t e = cudaFuncSetAttribute(products_kernel<K, V>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(bytes));
  if (e != cudaSuccess) return e;
  const ForwardParams& p = bp.f;
  const BackwardLayout bl = backward_layout(p.B, p.T, p.N, p.HV, K, V);
  const int64_t tasks = bl.fwd.cap * p.HV;
  if (tasks > INT_MAX) return cudaErrorInvalidConfiguration;  // chunked_backward_support refuses such sizes first
  products_kernel<K, V><<<static_cast<unsigned>(tasks), kThreads, bytes, s>>>(bp, ws);
  return cudaSuccess;
}

}  // namespace

size_t products_smem_bytes(int K, int V) {
  if (K == 64) return V == 64 ? ProdSmem<64, 64>::kBytes : ProdSmem<64, 128>::kBytes;
  return V == 64 ? ProdSmem<128, 64>::kBytes : ProdSmem<128, 128>::kBytes;
}

cudaError_t launch_products(const BackwardParams& bp, char* ws, cudaStream_t s) {
  const ForwardParams& p = bp.f;
  if (p.K == 64) return p.V == 64 ? launch<64, 64>(bp, ws, s) : launch<64, 128>(bp, ws, s);
  return p.V == 64 ? launch<128, 64>(bp, ws, s) : launch<128, 128>(bp, ws, s);
}

}  // namespace kda::cuda::chunk
