// chunk_products.cu: the chunked backward's products (docs/backward.md; launch 4 of backward_chunked.cu): per
// (chunk, value head), the matrix products of the gradient pass, from the saved forward quantities (BackwardLayout:
// T, S0, V_new; phase 1's U0 and W tiles) and the reverse pass's dU and chunk-end dS, into the task's product tiles
// (ProdLayout) that the per-channel pass (chunk_grad.cu) reads:
//   P1  dM = lower(dO' V_new^T), QS = dO' S0, KD = V_new dS, dW = -dU S0      (dO' = scale dO; inner dimension V)
//   P2  BV = T^T dU, BK = T^T dW                                            (inner dimension C)
//   P3  dA = -strictly_lower(BV U0^T + BK W^T)                              (inner dimension V, then K)
//   CS  colsum(S0 . dS): the coefficient of the whole chunk's decay in dg
// Why a kernel of its own: inside the per-channel pass these products ran at one 8-warp CTA per SM (that pass's 210 KB
// of shared memory), where their operand loads were exposed; here a CTA needs 50 KB and 128 registers per thread,
// so two CTAs share an SM and hide each other's loads. The products run on tensor cores in bf16x3 (block_gemm below).
//
// Grid: one CTA of 256 threads per (chunk list entry, value head); entries past the list's length return at once.
// Shared memory: the GEMM staging (a 16-step k-slice of A and B as bf16 hi / lo planes, padded) and dW [C][K] (P2's
// operand), which first holds dO' [C][V + 16] (P1's): 55,296 bytes at K = V = 128, two CTAs per SM (by registers).
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

// Staging of one k-slice: A [64][kKS] and B [N][kKS] (both k-contiguous), each as a hi and a lo bf16 plane of row
// pitch kPitch = kKS + 8 elements (80 bytes: the 8 rows an ldmatrix reads start in 8 different 16-byte bank groups).
constexpr int kKS = 16, kPitch = kKS + 8;

template <int K, int V>
struct ProdSmem {  // float offsets into shared memory
  static constexpr int W = K > V ? K : V;
  // A and B staging: two bf16 planes of [rows][kPitch] each (kPitch / 2 floats per row and plane).
  static constexpr int kAs = 0, kBs = kAs + kC * kPitch, kDW = kBs + W * kPitch;
  // dO' [C][kOPitch] shares dW's space (dO' is read by P1's first two products, dW written after the fourth). Pitch
  // V + 16: the A fetch's two rows per 16 lanes start 16 banks apart.
  static constexpr int kOPitch = V + 16, kTail = K > kOPitch ? K : kOPitch;
  static constexpr size_t kBytes = sizeof(float) * (kDW + kC * kTail);
};

// acc (+)= A B for the block's 64 x N output, A = fa(row, k) [64 x kin], B = fb(k, col) [kin x N], kin a multiple of
// kKS, in bf16x3 on mma.m16n8k16 (chunk_common.cuh: ~16-bit operands, fp32 accumulation; the rounding model passes
// backward-quick with these products at the fp32 products' figures, bench/results/
// 2026-11-30-cpu-model-grad-products-bf16x3-tf32.log). Each operand element is split into its hi / lo planes once,
// when staged (3xTF32 split every fragment in every warp: session 7's gradprodtc lost to fp32 SIMT), and the mma loop
// only ldmatrix-es and multiplies. Warp w owns rows 16 (w % 4) .. + 15 and columns (N / 2) (w / 4) .. + N / 2 - 1
// (N / 16 n-tiles of 8); acc[e][nt] is element e of n-tile nt's C fragment (for_each_out maps it back). The next
// slice's operands are loaded into registers while this one computes. A_T / B_T say the operand's source is
// contiguous in the row (A) or in k (B), so consecutive threads read consecutive source elements either way. Ends
// with a barrier, so the caller may restage right after.
template <int N, bool A_T, bool B_T, class FA, class FB>
__device__ __forceinline__ void block_gemm(float* As_f, float* Bs_f, int kin, FA fa, FB fb, float (&acc)[4][N / 16]) {
  constexpr int PA = kC * kPitch, PB = N * kPitch;  // plane sizes (elements)
  constexpr int EA = kC * kKS / 2 / kThreads, EB = N * kKS / 2 / kThreads;  // element pairs per thread
  static_assert(EA * 2 * kThreads == kC * kKS && EB * 2 * kThreads == N * kKS, "block_gemm: staging must tile");
  __nv_bfloat16* const As = reinterpret_cast<__nv_bfloat16*>(As_f);
  __nv_bfloat16* const Bs = reinterpret_cast<__nv_bfloat16*>(Bs_f);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int m0 = 16 * (warp & 3), n0 = (N / 2) * (warp >> 2);
  // Pair i of this thread's staging share: (row or col, 2 kp) and (row or col, 2 kp + 1) of the slice (mma_layout.h
  // slice_pair; tests/cpu/test_mma_layout.cpp emulates this staging and the warps' ldmatrix / mma over it).
  auto a_at = [&](int i, int* r, int* kp) {
    const SlicePair sp = slice_pair(tid + i * kThreads, kC, kKS / 2, !A_T);
    *r = sp.row;
    *kp = sp.kp;
  };
  auto b_at = [&](int i, int* c, int* kp) {
    const SlicePair sp = slice_pair(tid + i * kThreads, N, kKS / 2, B_T);
    *c = sp.row;
    *kp = sp.kp;
  };
  float ra[2 * EA], rb[2 * EB];
  auto fetch = [&](int k0) {
#pragma unroll
    for (int i = 0; i < EA; ++i) {
      int r, kp;
      a_at(i, &r, &kp);
      ra[2 * i] = fa(r, k0 + 2 * kp);
      ra[2 * i + 1] = fa(r, k0 + 2 * kp + 1);
    }
#pragma unroll
    for (int i = 0; i < EB; ++i) {
      int c, kp;
      b_at(i, &c, &kp);
      rb[2 * i] = fb(k0 + 2 * kp, c);
      rb[2 * i + 1] = fb(k0 + 2 * kp + 1, c);
    }
  };
  const LdsmRow la = ldsm_a_rowmajor(lane), lb = ldsm_b_nmajor(lane);
  fetch(0);
  for (int k0 = 0; k0 < kin; k0 += kKS) {
#pragma unroll
    for (int i = 0; i < EA; ++i) {
      int r, kp;
      a_at(i, &r, &kp);
      store_split2(As, PA, r * kPitch + 2 * kp, ra[2 * i], ra[2 * i + 1]);
    }
#pragma unroll
    for (int i = 0; i < EB; ++i) {
      int c, kp;
      b_at(i, &c, &kp);
      store_split2(Bs, PB, c * kPitch + 2 * kp, rb[2 * i], rb[2 * i + 1]);
    }
    __syncthreads();
    if (k0 + kKS < kin) fetch(k0 + kKS);
#pragma unroll
    for (int kk = 0; kk < kKS; kk += 16) {
      uint32_t ah[4], al[4];
      const int ea = (m0 + la.row) * kPitch + kk + la.col;
      ldsm_x4<false>(ah, As + ea);
      ldsm_x4<false>(al, As + PA + ea);
#pragma unroll
      for (int np = 0; np < N / 32; ++np) {
        uint32_t bh[4], bl[4];
        const int eb = (n0 + 16 * np + lb.row) * kPitch + kk + lb.col;
        ldsm_x4<false>(bh, Bs + eb);
        ldsm_x4<false>(bl, Bs + PB + eb);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float c[4] = {acc[0][2 * np + h], acc[1][2 * np + h], acc[2][2 * np + h], acc[3][2 * np + h]};
          mma_bf16x3(c, ah, al, bh, bl, h);
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[e][2 * np + h] = c[e];
        }
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

// Calls epi(row, col, value) for each of this thread's block_gemm outputs (the m16n8 C fragment: c0, c1 at row grp,
// columns 2 tig, +1; c2, c3 at row grp + 8).
template <int N, class Epi>
__device__ __forceinline__ void for_each_out(const float (&acc)[4][N / 16], Epi epi) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, grp = lane >> 2, tig = lane & 3;
  const int m0 = 16 * (warp & 3), n0 = (N / 2) * (warp >> 2);
#pragma unroll
  for (int nt = 0; nt < N / 16; ++nt) {
    const int c = n0 + 8 * nt + 2 * tig;
    epi(m0 + grp, c, acc[0][nt]);
    epi(m0 + grp, c + 1, acc[1][nt]);
    epi(m0 + grp + 8, c, acc[2][nt]);
    epi(m0 + grp + 8, c + 1, acc[3][nt]);
  }
}

__device__ __forceinline__ float bf16_at(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }

// 256 threads at 128 registers (ptxas, sm_90a: 0-40 bytes of spill loads, a few 64-bit addresses outside the mma
// loops; a 32-step k-slice spilled 90-350 bytes): two CTAs per SM, 16 warps, by registers; shared memory would allow
// four. Value heads hv0 .. hv0 + heads - 1 (all of them but where backward_chunked.cu overlaps a partial last wave of
// the reverse pass with the other heads' products), CTA x taking chunk x / heads, head hv0 + x % heads: each chunk's
// heads side by side, as with all of them.
template <int K, int V>
__global__ void __launch_bounds__(kThreads, 2) products_kernel(const BackwardParams bp, char* ws, int hv0, int heads) {
  using Ly = ProdSmem<K, V>;
  const ForwardParams& p = bp.f;
  extern __shared__ __align__(16) float smem[];
  float* const As = smem + Ly::kAs;
  float* const Bs = smem + Ly::kBs;
  float* const dWs = smem + Ly::kDW;  // -dU S0 [C][K]
  float* const dOs = smem + Ly::kDW;  // dO' [C][kOPitch], until dW is written

  const int tid = threadIdx.x;
  const BackwardLayout bl = backward_layout(p.B, p.T, p.N, p.HV, K, V, p.group);
  const WorkspaceLayout& wl = bl.fwd;
  const int64_t count = *reinterpret_cast<const int64_t*>(ws);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Launched beside a reverse pass over other heads (chunk_kernels.h HeadRange): no CTA waits for it but the last,
  // so this grid's completion implies that pass's. Without such a launch it returns at once.
  if (blockIdx.x == gridDim.x - 1) asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  const int64_t ci = blockIdx.x / heads;
  if (ci >= count) return;  // past the list: the per-channel pass skips these tasks too
  const int hv = hv0 + static_cast<int>(blockIdx.x % heads);
  const int64_t task = ci * p.HV + hv;
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

  // ---- P1: the products with the state and V_new (inner dimension V). dO' = scale dO, rows past L zeros, staged once
  // in shared memory (fp32, what block_gemm's fetch reads): thread tid takes column tid % V of rows tid / V + R i, the
  // raw bits of its kE elements loaded first (the dtype test outside: per-element tests spilled on sm_80), converted
  // after (kE = 32 registers at V = 128, before any accumulator is live). Converted in every k-slice fetch of the two
  // products that read it, these loads held 41% of the kernel's stall samples (ncu, H200).
  {
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
      dOs[t * Ly::kOPitch + v] = t < L ? p.scale * bits_to_float(raw[i], dO.dtype) : 0.0f;
    }
  }
  __syncthreads();  // dO' staged
  auto dOp = [&](int t, int v) { return dOs[t * Ly::kOPitch + v]; };
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
cudaError_t launch(const BackwardParams& bp, char* ws, cudaStream_t s, const HeadRange& heads) {
  const size_t bytes = ProdSmem<K, V>::kBytes;
  cudaError_t e = cudaFuncSetAttribute(products_kernel<K, V>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(bytes));
  if (e != cudaSuccess) return e;
  const ForwardParams& p = bp.f;
  const BackwardLayout bl = backward_layout(p.B, p.T, p.N, p.HV, K, V, p.group);
  const int n = heads.count_of(p.HV);
  const int64_t tasks = bl.fwd.cap * n;
  if (tasks > INT_MAX) return cudaErrorInvalidConfiguration;  // chunked_backward_support refuses such sizes first
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(tasks));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = bytes;
  cfg.stream = s;
  return launch_maybe_beside(cfg, heads.beside_previous, products_kernel<K, V>, bp, ws, heads.first, n);
}

}  // namespace

size_t products_smem_bytes(int K, int V) {
  return dispatch_kn<64, 128>(K, V, [](auto k, auto v) {
    return ProdSmem<decltype(k)::value, decltype(v)::value>::kBytes;
  });
}

cudaError_t launch_products(const BackwardParams& bp, char* ws, cudaStream_t s, const HeadRange& heads) {
  const ForwardParams& p = bp.f;
  return dispatch_kn<64, 128>(p.K, p.V, [&](auto k, auto v) {
    return launch<decltype(k)::value, decltype(v)::value>(bp, ws, s, heads);
  });
}

}  // namespace kda::cuda::chunk
