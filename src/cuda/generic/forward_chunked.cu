// forward_chunked.cu: owns the chunked tensor-core CUDA forward (sm80+ mma.sync tf32), chunked_forward*() of
// cuda_backend.h: the WY chunk form of docs/algorithm.md with the CPU backend's overflow-proof exponent arrangement.
//
// Work split. One CTA of 256 threads (8 warps) per (sequence n, value head hv, 64-column V tile); the CTA walks the
// sequence's 64-token chunks in order and keeps its 64 x K slice of the fp32 state on chip: in shared memory between
// chunks (the operand of the next chunk's products), and in registers only while the state-update product runs as
// its accumulator (warp w owns rows 16 (w % 4) .. +15 and columns (K / 2) (w / 4) .. +K/2-1, K / 16 n-tiles of 4
// floats = 32 registers at K = 128; held across the whole chunk they pushed the other phases into spills). The intra-chunk work (A_kk, A_qk, T = (I + A_kk)^-1) is repeated by the V / 64 CTAs of a head:
// at H = 64, K = V = 128 that still gives 128 CTAs for 132 SMs, which matters more than the duplicated work.
//
// Exponent arrangement (the CPU backend's; nothing ever forms exp(-Gamma)). g is staged in log2 units (G2). For
// 16-token block b and channel d: Gloc (block-relative prefix sums), Ksuf (suffix sums to the block end) and
// P_b = exp2(block sum). Every factor is an exp2 of a sum of g over the tokens it spans, <= 1:
//   Qr = q exp2(Gloc), Kr = k exp2(Gloc), Ksuf = k exp2(sum over (t, block end]);
//   exp(Gamma_t) = exp2(Gloc_t) * pre_b (pre_b = P_0 .. P_{b-1}), exp(Gamma_last - Gamma_t) = exp2(suffix) * post_b;
//   off-diagonal blocks (I > J): exp(Gamma_r - Gamma_c) = exp2(Gloc_r) * (P_{J+1} .. P_{I-1}) * exp2(suffix_c),
//     i.e. the CPU's split at the reference point r0 - 1 (end of block I - 1), computed as a tensor-core product;
//   diagonal blocks: exp2 of the sum of g from c + 1 to r, pairwise, in fp32 (no tensor cores).
// Products of factors <= 1 cannot overflow and underflow only where the exact product is below ~1e-38.
//
// Precision. Every matrix product runs on tf32 mma.sync (m16n8k8, operands rounded with cvt.rna, fp32 accumulate):
// the products that touch the state (Kg S^T, Qg S^T, the state update) and the intra-chunk ones alike; the diagonal
// blocks of A_kk / A_qk and the triangular inverse T are fp32 FMA. The state itself is only ever accumulated in fp32.
// V_new = T (beta V - Kg S^T), which is U - W S^T without forming W.
//
// Shared memory (K = 128): 3 x [64][132] fp32 chunk buffers (q_hat / k_hat / g, rewritten in place into Qr / Kr /
// Ksuf), the state mirror [64][132], beta V / Y and V_new [64][72], A_kk, A_qk, T [64][68], and per-channel factor
// tables: 231,168 bytes, one CTA per SM (H100/H200 allow 232,448; chunked_forward_supported checks the device). Pitches: K-wide and 64-wide row-major buffers
// read as the A operand or as a transposed B operand use a pitch = 4 (mod 32) words, buffers read as a plain
// (k-major) B operand a pitch = 8 (mod 32): both make the fragment loads conflict-free.
//
// Status (H200, 2026-11-29): exact to the tensor-core class (h64-fixed: out rel RMSE 1.75e-3, final state 4.8e-4)
// but latency-bound, not yet faster than FLA: 4.68 ms on h64-fixed. One CTA of 8 warps per SM (12.5% occupancy,
// IPC 1.65) runs ~12 barrier-separated phases per chunk; by phase-skipping the gate/L2-norm staging costs 1.39 ms,
// P3 (Kdec, T's off-diagonal blocks) 0.83 ms, the pairwise diagonal blocks 0.79 ms, the P2 products 0.79 ms.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "common/math.h"
#include "common/params.h"
#include "cuda/cuda_backend.h"
#include "cuda/device_common.cuh"
#include "cuda/launch.h"

namespace kda::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kC = 64;   // chunk
constexpr int kBV = 64;  // V columns per CTA
constexpr float kLog2e = 1.4426950408889634f;

template <int K>
struct Layout {
  static constexpr int PK = K + 4;    // K-wide buffers
  static constexpr int PV = kBV + 8;  // beta V / Y and V_new (plain B operands)
  static constexpr int PA = kC + 4;   // A_kk, A_qk, T
  static constexpr int kQ = 0, kK = kQ + kC * PK, kG = kK + kC * PK, kS = kG + kC * PK;
  static constexpr int kY = kS + kBV * PK, kVn = kY + kC * PV;
  static constexpr int kAkk = kVn + kC * PV, kAqk = kAkk + kC * PA, kT = kAqk + kC * PA;
  static constexpr int kPre = kT + kC * PA;  // [4][K]: P_0 .. P_{b-1}
  static constexpr int kPost = kPre + 4 * K;  // [4][K]: P_{b+1} .. P_3
  static constexpr int kFac = kPost + 4 * K;  // [3][K]: P_1 (I,J = 2,0), P_2 (3,1), P_1 P_2 (3,0)
  static constexpr int kTot = kFac + 3 * K;   // [K]: P_0 .. P_3, the chunk's decay of the state
  static constexpr int kBias = kTot + K;      // [K]: dt_bias of the head
  static constexpr int kBeta = kBias + K;     // [64]
  static constexpr int kFloats = kBeta + kC;
  static constexpr size_t kBytes = sizeof(float) * kFloats;
  static_assert(K % 32 == 0 && 16 * 48 <= kC * PK, "level scratch lives in the q buffer");
};

__device__ __forceinline__ uint32_t tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}

__device__ __forceinline__ float ex2(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ uint4 ldg16(const void* p) { return __ldg(static_cast<const uint4*>(p)); }

// 8 values of a 16-byte vector of bf16 or fp16.
__device__ __forceinline__ void cvt8(const uint4& u, kda_dtype_t dt, float* out) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
  if (dt == KDA_DTYPE_BFLOAT16) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out[2 * i] = __uint_as_float(w[i] << 16);
      out[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      __half2 h;
      memcpy(&h, &w[i], 4);
      const float2 f = __half22float2(h);
      out[2 * i] = f.x;
      out[2 * i + 1] = f.y;
    }
  }
}

__device__ __forceinline__ float scalar_to_float(const void* base, kda_dtype_t dt, int64_t off) {
  switch (dt) {
    case KDA_DTYPE_BFLOAT16: return __uint_as_float(uint32_t{static_cast<const uint16_t*>(base)[off]} << 16);
    case KDA_DTYPE_FLOAT16: return __half2float(static_cast<const __half*>(base)[off]);
    default: return static_cast<const float*>(base)[off];
  }
}

// Sum over the 4 lanes of an aligned quad.
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// 1 / sqrt(sum x^2 + eps) of a row spread over a quad (N values per lane), robust to overflowing sums of squares
// (the recurrent kernel's robust_inv_norm, same formulas). Called by all 32 lanes.
template <int N>
__device__ __forceinline__ float quad_inv_norm(const float (&x)[N]) {
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < N; ++i) ss = fmaf(x[i], x[i], ss);
  ss = quad_sum(ss);
  const bool finite = isfinite(ss);
  if (__all_sync(0xffffffffu, finite)) return l2_inv_norm(ss, 0.0f, false);
  float m = 0.0f;
#pragma unroll
  for (int i = 0; i < N; ++i) m = fmaxf(m, fabsf(x[i]));
  m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
  m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
  m = fmaxf(m, 1e-30f);
  // One reciprocal instead of N IEEE divisions: inlined 2 x 32 times they were a sixth of the kernel's code.
  const float rm = 1.0f / m;
  float s2 = 0.0f;
#pragma unroll
  for (int i = 0; i < N; ++i) s2 = fmaf(x[i] * rm, x[i] * rm, s2);
  s2 = quad_sum(s2);
  return finite ? l2_inv_norm(ss, 0.0f, false) : l2_inv_norm(s2, m, true);
}

// The raw bits of one chunk that a thread stages: token tid / 4, channels 8 (tid % 4) + 32 j (8 per 16 bytes;
// g takes two vectors per group when it is fp32), V-tile columns 8 (tid % 4) + 32 j, and the token's beta.
template <int K>
struct Raw {
  uint4 q[K / 32], k[K / 32], g[K / 32], v[2];  // g: 2-byte g only (fp32 g is read when staged)
  float beta;
};

template <int K>
__global__ void __launch_bounds__(kThreads, 1) chunked_forward_kernel(const ForwardParams p, int vtiles) {
  using Ly = Layout<K>;
  constexpr int PK = Ly::PK, PV = Ly::PV, PA = Ly::PA;
  constexpr int NJ = K / 32;  // 8-channel groups per staging thread
  extern __shared__ __align__(16) float smem[];
  float* const Qs = smem + Ly::kQ;
  float* const Ks = smem + Ly::kK;
  float* const Gs = smem + Ly::kG;
  float* const Ss = smem + Ly::kS;
  float* const Yv = smem + Ly::kY;
  float* const Vn = smem + Ly::kVn;
  float* const Akk = smem + Ly::kAkk;
  float* const Aqk = smem + Ly::kAqk;
  float* const Tm = smem + Ly::kT;
  float* const pre_s = smem + Ly::kPre;
  float* const post_s = smem + Ly::kPost;
  float* const fac_s = smem + Ly::kFac;
  float* const tot_s = smem + Ly::kTot;
  float* const bias_s = smem + Ly::kBias;
  float* const beta_s = smem + Ly::kBeta;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int grp = lane >> 2, tig = lane & 3;

  const int vt = static_cast<int>(blockIdx.x % vtiles);
  const int64_t nh = blockIdx.x / vtiles;
  const int hv = static_cast<int>(nh % p.HV);
  const int64_t n = nh / p.HV;
  const int h = hv / p.group;
  const int v0 = vt * kBV;

  // The sequence's tokens (device cu_seqlens clamped to [0, T], as in the recurrent kernel).
  int64_t b = n, start = 0, len = p.T;
  if (p.has_cu_seqlens()) {
    b = 0;
    start = min(max(load_cu_seqlen(p.cu_seqlens, n), int64_t{0}), p.T);
    len = min(max(load_cu_seqlen(p.cu_seqlens, n + 1), start), p.T) - start;
  }

  const bool has_a_log = p.has_A_log();
  const float a_log = has_a_log ? static_cast<const float*>(p.A_log.data)[hv * p.A_log.stride[0]] : 0.0f;
  for (int d = tid; d < K; d += kThreads)
    bias_s[d] = p.gate_mode != KDA_GATE_LOG_DECAY
                    ? static_cast<const float*>(p.dt_bias.data)[hv * p.dt_bias.stride[0] + d * p.dt_bias.stride[1]]
                    : 0.0f;
  // A_qk's diagonal blocks are read whole by the output product: their upper triangles stay zero.
  for (int e = tid; e < 4 * 256; e += kThreads) {
    const int blk = e >> 8, r = (e >> 4) & 15, c = e & 15;
    if (c > r) Aqk[(16 * blk + r) * PA + 16 * blk + c] = 0.0f;
  }

  // This warp's part of the state-update product: rows v = 16 mv + grp (+8), columns d = dn0 + 8 nt + 2 tig (+1).
  const int mv = warp & 3, dn0 = (warp >> 2) * (K / 2);
  // The state's shared mirror [64][K + 4] (a rolled, coalesced loop: unrolled per register, the 64-bit offset
  // arithmetic cost ~8 KiB of code at each end of the kernel).
  for (int e = tid; e < kBV * K; e += kThreads) {
    const int v = e / K, d = e % K;
    Ss[v * PK + d] = p.has_initial_state()
                         ? static_cast<const float*>(p.initial_state.data)[p.state_offset(p.initial_state.stride, n,
                                                                                           hv, v0 + v, d)]
                         : 0.0f;
  }
  __syncthreads();

  // Staging role.
  const int st = tid >> 2, sq = tid & 3;
  const kda_dtype_t in_dt = p.q.dtype, g_dt = p.g.dtype;
  const int64_t q_base = b * p.q.stride[0] + h * p.q.stride[2] + 8 * sq;
  const int64_t k_base = b * p.k.stride[0] + h * p.k.stride[2] + 8 * sq;
  const int64_t g_base = b * p.g.stride[0] + hv * p.g.stride[2] + 8 * sq;
  const int64_t v_base = b * p.v.stride[0] + hv * p.v.stride[2] + v0 + 8 * sq;
  const int64_t beta_base = b * p.beta.stride[0] + hv * p.beta.stride[2];

  Raw<K> raw;
  auto load_raw = [&](int64_t t0, int L) {
    if (st < L) {
      const int64_t t = t0 + st;
      const uint16_t* qp = static_cast<const uint16_t*>(p.q.data) + q_base + t * p.q.stride[1];
      const uint16_t* kp = static_cast<const uint16_t*>(p.k.data) + k_base + t * p.k.stride[1];
      const uint16_t* vp = static_cast<const uint16_t*>(p.v.data) + v_base + t * p.v.stride[1];
#pragma unroll
      for (int j = 0; j < NJ; ++j) {
        raw.q[j] = ldg16(qp + 32 * j);
        raw.k[j] = ldg16(kp + 32 * j);
      }
      if (g_dt != KDA_DTYPE_FLOAT32) {
        const uint16_t* gp = static_cast<const uint16_t*>(p.g.data) + g_base + t * p.g.stride[1];
#pragma unroll
        for (int j = 0; j < NJ; ++j) raw.g[j] = ldg16(gp + 32 * j);
      }
      raw.v[0] = ldg16(vp);
      raw.v[1] = ldg16(vp + 32);
      raw.beta = scalar_to_float(p.beta.data, p.beta.dtype, beta_base + t * p.beta.stride[1]);
    } else {
      const uint4 z = make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int j = 0; j < NJ; ++j) raw.q[j] = raw.k[j] = raw.g[j] = z;
      raw.v[0] = raw.v[1] = z;
      raw.beta = 0.0f;
    }
  };

  const int64_t chunks = (len + kC - 1) / kC;
  if (chunks > 0) load_raw(start, static_cast<int>(min(len, int64_t{kC})));
  __syncthreads();  // bias_s, Ss

  for (int64_t ci = 0; ci < chunks; ++ci) {
    const int64_t t0 = start + ci * kC;
    const int L = static_cast<int>(min(len - ci * kC, int64_t{kC}));

    // ---- P0: stage q_hat, k_hat, g (log2 units), beta V and beta; tokens past L are zero (g too: the padded
    // tokens then change no sum, product or state).
    {
      const bool live = st < L;
      // q then k (one row of K / 4 floats live at a time), then g as read (the gate follows in place).
#pragma unroll
      for (int which = 0; which < 2; ++which) {
        float x[K / 4];
#pragma unroll
        for (int j = 0; j < NJ; ++j) cvt8(which ? raw.k[j] : raw.q[j], in_dt, x + 8 * j);
        if (p.use_qk_l2norm) {
          const float inv = quad_inv_norm(x);
#pragma unroll
          for (int i = 0; i < K / 4; ++i) x[i] *= inv;
        }
        float* const dst = (which ? Ks : Qs) + st * PK + 8 * sq;
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
          *reinterpret_cast<float4*>(dst + 32 * j) = make_float4(x[8 * j], x[8 * j + 1], x[8 * j + 2], x[8 * j + 3]);
          *reinterpret_cast<float4*>(dst + 32 * j + 4) =
              make_float4(x[8 * j + 4], x[8 * j + 5], x[8 * j + 6], x[8 * j + 7]);
        }
      }
#pragma unroll
      for (int j = 0; j < NJ; ++j) {
        float g[8];
        if (g_dt == KDA_DTYPE_FLOAT32) {
          // fp32 g is not prefetched (it would double the prefetch registers of g); read here, 2 x 16 bytes.
          uint4 a = make_uint4(0, 0, 0, 0), c = a;
          if (live) {
            const float* gp = static_cast<const float*>(p.g.data) + g_base + (t0 + st) * p.g.stride[1] + 32 * j;
            a = ldg16(gp);
            c = ldg16(gp + 4);
          }
          g[0] = __uint_as_float(a.x); g[1] = __uint_as_float(a.y); g[2] = __uint_as_float(a.z);
          g[3] = __uint_as_float(a.w); g[4] = __uint_as_float(c.x); g[5] = __uint_as_float(c.y);
          g[6] = __uint_as_float(c.z); g[7] = __uint_as_float(c.w);
        } else {
          cvt8(raw.g[j], g_dt, g);
        }
        float* gd = Gs + st * PK + 8 * sq + 32 * j;
        *reinterpret_cast<float4*>(gd) = make_float4(g[0], g[1], g[2], g[3]);
        *reinterpret_cast<float4*>(gd + 4) = make_float4(g[4], g[5], g[6], g[7]);
      }
      // The gate activation in a loop over this thread's own g entries (written above, so no barrier), unrolled
      // 2-wide for latency: inlined 32 times it made the kernel body far larger than the instruction caches.
#pragma unroll 2
      for (int i = 0; i < K / 4; ++i) {
        const int d = 8 * sq + 32 * (i >> 3) + (i & 7);
        float* gd = Gs + st * PK + d;
        *gd = live ? gate_log_decay<float>(p.gate_mode, *gd, has_a_log, a_log, bias_s[d], p.lower_bound) * kLog2e
                   : 0.0f;
      }
      const float beta = live ? beta_activation<float>(raw.beta, p.beta_is_logits, p.allow_neg_eigval) : 0.0f;
      if (sq == 0) beta_s[st] = beta;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        float v[8];
        cvt8(raw.v[j], in_dt, v);
        float* yd = Yv + st * PV + 8 * sq + 32 * j;
        *reinterpret_cast<float4*>(yd) = make_float4(beta * v[0], beta * v[1], beta * v[2], beta * v[3]);
        *reinterpret_cast<float4*>(yd + 4) = make_float4(beta * v[4], beta * v[5], beta * v[6], beta * v[7]);
      }
    }
    __syncthreads();

    // ---- P1a: diagonal 16x16 blocks of A_kk (times beta_r) and A_qk, exact pairwise in fp32. Thread group of 8
    // lanes = (block bk, column pair cp): columns cp (rows cp .. 15) and 15 - cp (rows 15 - cp .. 15), 17 row steps
    // in all (balanced), channels 4 sub + 32 i (float4 each). The exponent of pair (r, c) is the sum of g over
    // c + 1 .. r, accumulated along the rows. Partial dot products over the lane's channels are reduced over the 8
    // lanes by a reduce-scatter (28 shuffles for 32 values instead of 96).
    {
      const int sub = tid & 7, task = tid >> 3;
      const int bk = task >> 3, cp = task & 7;
      const int base = 16 * bk, c1 = cp, c2 = 15 - cp, sw = 16 - cp;  // step sw starts column c2
      // Channel groups outer (not unrolled: one copy of the 17 steps keeps the code small), steps inner.
      float val[32];  // [0, 17): q.k of steps 0..16; [17, 32): k.k of steps 1..15
      float kk16 = 0.0f;
#pragma unroll
      for (int s = 0; s < 32; ++s) val[s] = 0.0f;
#pragma unroll 1
      for (int i = 0; i < K / 32; ++i) {
        float4 e = make_float4(0.f, 0.f, 0.f, 0.f);
        const int col = 4 * sub + 32 * i;
        const float4 kc1 = *reinterpret_cast<const float4*>(Ks + (base + c1) * PK + col);
        const float4 kc2 = *reinterpret_cast<const float4*>(Ks + (base + c2) * PK + col);
#pragma unroll
        for (int s = 0; s < 17; ++s) {
          const bool col2 = s >= sw;
          const bool first = s == 0 || s == sw;
          const int off = (base + (col2 ? s - 1 : cp + s)) * PK + col;
          const float4 g4 = *reinterpret_cast<const float4*>(Gs + off);
          const float4 q4 = *reinterpret_cast<const float4*>(Qs + off);
          const float4 k4 = *reinterpret_cast<const float4*>(Ks + off);
          const float4 kc = col2 ? kc2 : kc1;
          e.x = first ? 0.0f : e.x + g4.x;
          e.y = first ? 0.0f : e.y + g4.y;
          e.z = first ? 0.0f : e.z + g4.z;
          e.w = first ? 0.0f : e.w + g4.w;
          const float wx = ex2(e.x) * kc.x, wy = ex2(e.y) * kc.y;
          const float wz = ex2(e.z) * kc.z, ww = ex2(e.w) * kc.w;
          const float qk = fmaf(q4.x, wx, fmaf(q4.y, wy, fmaf(q4.z, wz, q4.w * ww)));
          const float kk = fmaf(k4.x, wx, fmaf(k4.y, wy, fmaf(k4.z, wz, k4.w * ww)));
          val[s] += qk;
          if (s >= 1 && s <= 15) val[16 + s] += first ? 0.0f : kk;
          if (s == 16) kk16 += first ? 0.0f : kk;
        }
      }
      // Reduce-scatter over the 8 lanes: lane sub ends with the full sums of entries 4 sub .. 4 sub + 3.
      {
        const bool up = sub & 4;
#pragma unroll
        for (int i = 0; i < 16; ++i) {
          const float send = up ? val[i] : val[i + 16], keep = up ? val[i + 16] : val[i];
          val[i] = keep + __shfl_xor_sync(0xffffffffu, send, 4);
        }
      }
      {
        const bool up = sub & 2;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const float send = up ? val[i] : val[i + 8], keep = up ? val[i + 8] : val[i];
          val[i] = keep + __shfl_xor_sync(0xffffffffu, send, 2);
        }
      }
      {
        const bool up = sub & 1;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float send = up ? val[i] : val[i + 4], keep = up ? val[i + 4] : val[i];
          val[i] = keep + __shfl_xor_sync(0xffffffffu, send, 1);
        }
      }
      kk16 += __shfl_xor_sync(0xffffffffu, kk16, 4);
      kk16 += __shfl_xor_sync(0xffffffffu, kk16, 2);
      kk16 += __shfl_xor_sync(0xffffffffu, kk16, 1);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int j = 4 * sub + i;
        const int s = j <= 16 ? j : j - 16;
        const bool col2 = s >= sw;
        const int r = col2 ? s - 1 : cp + s, c = col2 ? c2 : c1;
        if (j <= 16)
          Aqk[(base + r) * PA + base + c] = val[i];
        else
          Akk[(base + r) * PA + base + c] = beta_s[base + r] * val[i];
      }
      if (sub == 0) Akk[(base + 15) * PA + base + c2] = beta_s[base + 15] * kk16;
    }
    // The per-channel factor tables (P1b rewrites g in place, so the block sums are taken here).
    if (tid < K) {
      const int d = tid;
      float P[4];
#pragma unroll
      for (int bk = 0; bk < 4; ++bk) {
        float gl = 0.0f;
#pragma unroll
        for (int i = 0; i < 16; ++i) gl += Gs[(16 * bk + i) * PK + d];
        P[bk] = ex2(gl);
      }
      pre_s[d] = 1.0f;
      pre_s[K + d] = P[0];
      pre_s[2 * K + d] = P[0] * P[1];
      pre_s[3 * K + d] = P[0] * P[1] * P[2];
      tot_s[d] = P[0] * P[1] * P[2] * P[3];
      post_s[3 * K + d] = 1.0f;
      post_s[2 * K + d] = P[3];
      post_s[K + d] = P[2] * P[3];
      post_s[d] = P[1] * P[2] * P[3];
      fac_s[d] = P[1];
      fac_s[K + d] = P[2];
      fac_s[2 * K + d] = P[1] * P[2];
    }
    __syncthreads();

    // ---- P1b: per channel and block, in place: Qs <- Qr, Ks <- Kr, Gs <- Ksuf; the factor tables.
    {
      const int d = tid % K, b0 = tid / K;
      constexpr int kBStep = kThreads / K;  // 2 (K = 128) or 4 (K = 64)
#pragma unroll
      for (int bb = 0; bb < 4 / kBStep; ++bb) {
        const int bk = b0 + bb * kBStep;
        float g[16], q[16], k[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) {
          const int off = (16 * bk + i) * PK + d;
          g[i] = Gs[off];
          q[i] = Qs[off];
          k[i] = Ks[off];
        }
        float gl = 0.0f, gsum = 0.0f;
#pragma unroll
        for (int i = 0; i < 16; ++i) {
          gl += g[i];
          const float x = ex2(gl);
          const int off = (16 * bk + i) * PK + d;
          Qs[off] = q[i] * x;
          Ks[off] = k[i] * x;
        }
#pragma unroll
        for (int i = 15; i >= 0; --i) {
          Gs[(16 * bk + i) * PK + d] = k[i] * ex2(gsum);
          gsum += g[i];
        }
      }
    }
    __syncthreads();

    // ---- P2 (tensor cores): O = Qg S^T (kept in registers), Y = beta V - Kg S^T (in place), the off-diagonal
    // blocks of A_kk / A_qk (warps 0-5), the inverses of A_kk's diagonal blocks (warps 6-7, fp32).
    const int m = warp & 3, nh = warp >> 2;
    const int r0 = 16 * m + grp, r1 = r0 + 8;
    float accO[4][4];
    {
      float accY[4][4];
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) accO[nt][e] = accY[nt][e] = 0.0f;
      const float be0 = beta_s[r0], be1 = beta_s[r1];
      const float* pre = pre_s + m * K;
#pragma unroll 4
      for (int ks = 0; ks < K / 8; ++ks) {
        const int c0 = 8 * ks + tig, c1 = c0 + 4;
        const float p0 = pre[c0], p1 = pre[c1];
        const uint32_t aq[4] = {tf32(Qs[r0 * PK + c0] * p0), tf32(Qs[r1 * PK + c0] * p0), tf32(Qs[r0 * PK + c1] * p1),
                                tf32(Qs[r1 * PK + c1] * p1)};
        const uint32_t ak[4] = {tf32(Ks[r0 * PK + c0] * p0 * be0), tf32(Ks[r1 * PK + c0] * p0 * be1),
                                tf32(Ks[r0 * PK + c1] * p1 * be0), tf32(Ks[r1 * PK + c1] * p1 * be1)};
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
          const int nn = 32 * nh + 8 * nt + grp;
          const uint32_t bb[2] = {tf32(Ss[nn * PK + c0]), tf32(Ss[nn * PK + c1])};
          mma(accO[nt], aq, bb);
          mma(accY[nt], ak, bb);
        }
      }
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const int col = 32 * nh + 8 * nt + 2 * tig;
        Yv[r0 * PV + col] -= accY[nt][0];
        Yv[r0 * PV + col + 1] -= accY[nt][1];
        Yv[r1 * PV + col] -= accY[nt][2];
        Yv[r1 * PV + col + 1] -= accY[nt][3];
      }
    }
    if (warp < 6) {
      // Block (I, J), I > J: rows Kr / Qr of block I against Ksuf of block J scaled by P_{J+1} .. P_{I-1}.
      const int I = warp < 1 ? 1 : warp < 3 ? 2 : 3;
      const int J = warp < 1 ? 0 : warp < 3 ? warp - 1 : warp - 3;
      const float* F = I - J == 1 ? nullptr : fac_s + K * (I == 2 ? 0 : (J == 1 ? 1 : 2));
      float akk[2][4] = {}, aqk[2][4] = {};
      const int a0 = 16 * I + grp, a1 = a0 + 8;
#pragma unroll 4
      for (int ks = 0; ks < K / 8; ++ks) {
        const int c0 = 8 * ks + tig, c1 = c0 + 4;
        const float f0 = F ? F[c0] : 1.0f, f1 = F ? F[c1] : 1.0f;
        const uint32_t ak[4] = {tf32(Ks[a0 * PK + c0]), tf32(Ks[a1 * PK + c0]), tf32(Ks[a0 * PK + c1]),
                                tf32(Ks[a1 * PK + c1])};
        const uint32_t aq[4] = {tf32(Qs[a0 * PK + c0]), tf32(Qs[a1 * PK + c0]), tf32(Qs[a0 * PK + c1]),
                                tf32(Qs[a1 * PK + c1])};
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          const int nn = 16 * J + 8 * nt + grp;
          const uint32_t bb[2] = {tf32(Gs[nn * PK + c0] * f0), tf32(Gs[nn * PK + c1] * f1)};
          mma(akk[nt], ak, bb);
          mma(aqk[nt], aq, bb);
        }
      }
      const float be0 = beta_s[a0], be1 = beta_s[a1];
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const int col = 16 * J + 8 * nt + 2 * tig;
        Akk[a0 * PA + col] = be0 * akk[nt][0];
        Akk[a0 * PA + col + 1] = be0 * akk[nt][1];
        Akk[a1 * PA + col] = be1 * akk[nt][2];
        Akk[a1 * PA + col + 1] = be1 * akk[nt][3];
        Aqk[a0 * PA + col] = aqk[nt][0];
        Aqk[a0 * PA + col + 1] = aqk[nt][1];
        Aqk[a1 * PA + col] = aqk[nt][2];
        Aqk[a1 * PA + col + 1] = aqk[nt][3];
      }
    } else {
      // Column c of the inverse of diagonal block bk of (I + A_kk): forward substitution in fp32.
      const int j = tid - 192, bk = j >> 4, c = j & 15, base = 16 * bk;
      float x[16];
#pragma unroll
      for (int r = 0; r < 16; ++r) {
        float sum = 0.0f;
#pragma unroll
        for (int kx = 0; kx < r; ++kx) sum = fmaf(Akk[(base + r) * PA + base + kx], x[kx], sum);
        x[r] = r < c ? 0.0f : (r == c ? 1.0f : -sum);
      }
#pragma unroll
      for (int r = 0; r < 16; ++r) Tm[(base + r) * PA + base + c] = x[r];
    }
    __syncthreads();

    // ---- P3: Ksuf -> Kdec = Ksuf * post (in place), and T's off-diagonal blocks, block row by block row:
    // T_{I,<I} = -T_II (A_{I,<I} T_{<I,<I}), fp32 FMA. Scratch R [16][48] in the (now free) q buffer.
    // Next chunk's global loads, in flight behind the rest of this chunk (issued after P2, whose accumulators
    // and fragments would otherwise share the register file with them).
    if (ci + 1 < chunks) load_raw(t0 + kC, static_cast<int>(min(len - (ci + 1) * kC, int64_t{kC})));
    for (int e = tid; e < kC * K; e += kThreads) {
      const int t = e / K, d = e % K;
      Gs[t * PK + d] *= post_s[(t >> 4) * K + d];
    }
    float* const R = Qs;
#pragma unroll 1
    for (int I = 1; I < 4; ++I) {
      const int w = 16 * I;
      for (int e = tid; e < 16 * w; e += kThreads) {
        const int r = e / w, c = e % w;
        float sum = 0.0f;
#pragma unroll 4
        for (int kx = c & ~15; kx < w; ++kx) sum = fmaf(Akk[(w + r) * PA + kx], Tm[kx * PA + c], sum);
        R[r * 48 + c] = sum;
      }
      __syncthreads();
      for (int e = tid; e < 16 * w; e += kThreads) {
        const int r = e / w, c = e % w;
        float sum = 0.0f;
#pragma unroll 4
        for (int kx = 0; kx <= r; ++kx) sum = fmaf(Tm[(w + r) * PA + w + kx], R[kx * 48 + c], sum);
        Tm[(w + r) * PA + c] = -sum;
      }
      __syncthreads();
    }

    // ---- P4: V_new = T Y (T lower triangular: k-steps up to the diagonal block).
    {
      float acc[4][4];
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[nt][e] = 0.0f;
      for (int ks = 0; ks < 2 * (m + 1); ++ks) {
        const int c0 = 8 * ks + tig, c1 = c0 + 4;
        const uint32_t a[4] = {tf32(Tm[r0 * PA + c0]), tf32(Tm[r1 * PA + c0]), tf32(Tm[r0 * PA + c1]),
                               tf32(Tm[r1 * PA + c1])};
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
          const int nn = 32 * nh + 8 * nt + grp;
          const uint32_t bb[2] = {tf32(Yv[c0 * PV + nn]), tf32(Yv[c1 * PV + nn])};
          mma(acc[nt], a, bb);
        }
      }
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const int col = 32 * nh + 8 * nt + 2 * tig;
        *reinterpret_cast<float2*>(&Vn[r0 * PV + col]) = make_float2(acc[nt][0], acc[nt][1]);
        *reinterpret_cast<float2*>(&Vn[r1 * PV + col]) = make_float2(acc[nt][2], acc[nt][3]);
      }
    }
    __syncthreads();

    // ---- P5: O += tril(A_qk) V_new, stored; S <- S diag(tot) + V_new^T Kdec (registers, then the mirror).
    {
      for (int ks = 0; ks < 2 * (m + 1); ++ks) {
        const int c0 = 8 * ks + tig, c1 = c0 + 4;
        const uint32_t a[4] = {tf32(Aqk[r0 * PA + c0]), tf32(Aqk[r1 * PA + c0]), tf32(Aqk[r0 * PA + c1]),
                               tf32(Aqk[r1 * PA + c1])};
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
          const int nn = 32 * nh + 8 * nt + grp;
          const uint32_t bb[2] = {tf32(Vn[c0 * PV + nn]), tf32(Vn[c1 * PV + nn])};
          mma(accO[nt], a, bb);
        }
      }
      const int64_t ob = b * p.out_stride[0] + hv * p.out_stride[2] + v0;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = half ? r1 : r0;
        if (r >= L) continue;
        const int64_t rb = ob + (t0 + r) * p.out_stride[1];
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
          const int col = 32 * nh + 8 * nt + 2 * tig;
          const float x0 = p.scale * accO[nt][2 * half], x1 = p.scale * accO[nt][2 * half + 1];
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
    {
      // The state is in registers only here (warp: rows 16 mv .., columns dn0 ..): between chunks it lives in the
      // shared mirror alone, which keeps its 32 registers out of every other phase's budget.
      float S[K / 16][4];
#pragma unroll
      for (int nt = 0; nt < K / 16; ++nt) {
        const int v = 16 * mv + grp, d = dn0 + 8 * nt + 2 * tig;
        const float2 lo = *reinterpret_cast<const float2*>(&Ss[v * PK + d]);
        const float2 hi = *reinterpret_cast<const float2*>(&Ss[(v + 8) * PK + d]);
        const float f0 = tot_s[d], f1 = tot_s[d + 1];
        S[nt][0] = lo.x * f0;
        S[nt][1] = lo.y * f1;
        S[nt][2] = hi.x * f0;
        S[nt][3] = hi.y * f1;
      }
#pragma unroll 2
      for (int ks = 0; ks < kC / 8; ++ks) {
        const int k0 = 8 * ks + tig, k1 = k0 + 4;
        const int va = 16 * mv + grp;
        const uint32_t a[4] = {tf32(Vn[k0 * PV + va]), tf32(Vn[k0 * PV + va + 8]), tf32(Vn[k1 * PV + va]),
                               tf32(Vn[k1 * PV + va + 8])};
#pragma unroll
        for (int nt = 0; nt < K / 16; ++nt) {
          const int dd = dn0 + 8 * nt + grp;
          const uint32_t bb[2] = {tf32(Gs[k0 * PK + dd]), tf32(Gs[k1 * PK + dd])};
          mma(S[nt], a, bb);
        }
      }
#pragma unroll
      for (int nt = 0; nt < K / 16; ++nt) {
        const int v = 16 * mv + grp, d = dn0 + 8 * nt + 2 * tig;
        *reinterpret_cast<float2*>(&Ss[v * PK + d]) = make_float2(S[nt][0], S[nt][1]);
        *reinterpret_cast<float2*>(&Ss[(v + 8) * PK + d]) = make_float2(S[nt][2], S[nt][3]);
      }
    }
    __syncthreads();
  }

  // From the mirror, which the last chunk (or, for an empty sequence, the initial load) wrote before a barrier.
  // Every read of initial_state by this CTA happened before that barrier, and no other CTA touches these entries,
  // so an in-place update (final_state aliasing initial_state) is safe.
  if (p.has_final_state())
    for (int e = tid; e < kBV * K; e += kThreads) {
      const int v = e / K, d = e % K;
      static_cast<float*>(p.final_state)[p.state_offset(p.final_state_stride, n, hv, v0 + v, d)] = Ss[v * PK + d];
    }
}

bool aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0; }

size_t smem_bytes(int K) { return K == 128 ? Layout<128>::kBytes : Layout<64>::kBytes; }

}  // namespace

bool chunked_forward_supported(const ForwardParams& p) {
  if (p.K != 64 && p.K != 128) return false;
  if (p.V < kBV || p.V % kBV != 0) return false;
  const kda_dtype_t dt = p.q.dtype;
  if (dt != KDA_DTYPE_BFLOAT16 && dt != KDA_DTYPE_FLOAT16) return false;
  if (p.k.dtype != dt || p.v.dtype != dt) return false;
  if (p.g.dtype != dt && p.g.dtype != KDA_DTYPE_FLOAT32) return false;
  if (p.beta.dtype != dt && p.beta.dtype != KDA_DTYPE_FLOAT32) return false;
  if (p.out_dtype != KDA_DTYPE_BFLOAT16 && p.out_dtype != KDA_DTYPE_FLOAT16 && p.out_dtype != KDA_DTYPE_FLOAT32)
    return false;
  if (p.has_initial_state() && p.initial_state.dtype != KDA_DTYPE_FLOAT32) return false;
  if (p.has_final_state() && p.final_state_dtype != KDA_DTYPE_FLOAT32) return false;
  // 16-byte vector loads of q, k, v, g rows (8 elements of 2 bytes, or 4 of fp32 g) and pair stores of out.
  if (p.q.stride[3] != 1 || p.k.stride[3] != 1 || p.v.stride[3] != 1 || p.g.stride[3] != 1 || p.out_stride[3] != 1)
    return false;
  const int g_vec = p.g.dtype == KDA_DTYPE_FLOAT32 ? 4 : 8;
  for (int i = 0; i < 3; ++i)
    if (p.q.stride[i] % 8 || p.k.stride[i] % 8 || p.v.stride[i] % 8 || p.g.stride[i] % g_vec || p.out_stride[i] % 2)
      return false;
  if (p.T > 0 && (!aligned16(p.q.data) || !aligned16(p.k.data) || !aligned16(p.v.data) || !aligned16(p.g.data) ||
                  !aligned16(p.out)))
    return false;
  if (p.N * p.HV * (p.V / kBV) > INT_MAX) return false;
  int optin = 0;
  if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, p.device_id) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return static_cast<size_t>(optin) >= smem_bytes(p.K);
}

Status chunked_forward_workspace_size(const ForwardParams&, size_t* bytes) {
  *bytes = 0;
  return Status::Ok();
}

Status chunked_forward(const ForwardParams& p, void*, size_t, void* stream) {
  if (p.N == 0 || (p.T == 0 && !p.has_final_state())) return Status::Ok();
  return launch_on_device(p.device_id, "kda chunked forward kernel launch", [&] {
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    const int vtiles = p.V / kBV;
    const unsigned grid = static_cast<unsigned>(p.N * p.HV * vtiles);
    const size_t bytes = smem_bytes(p.K);
    cudaError_t e;
    if (p.K == 128) {
      e = cudaFuncSetAttribute(chunked_forward_kernel<128>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(bytes));
      if (e == cudaSuccess) chunked_forward_kernel<128><<<grid, kThreads, bytes, s>>>(p, vtiles);
    } else {
      e = cudaFuncSetAttribute(chunked_forward_kernel<64>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(bytes));
      if (e == cudaSuccess) chunked_forward_kernel<64><<<grid, kThreads, bytes, s>>>(p, vtiles);
    }
    return e;
  });
}

}  // namespace kda::cuda
