// decode.cu: owns the CUDA decode (kda::cuda::decode of cuda_backend.h): T tokens per sequence against an fp32
// state pool read and written in place through slot indices.
//
// Decode is bound by streaming the state (V * K * 4 bytes per (sequence, value head) in, the same out), so the
// design is about bytes in flight and CTA count, not arithmetic.
//
// Work split. A CTA of 64 * units threads (units = 1, 2 or 4, chosen per call: 1 keeps small batches at >= 512
// CTAs for H = 32, K = V = 128; 4 amortizes the per-CTA preprocessing over 32 rows once the grid is large) owns
// kRowsPerUnit * units rows of the V x K state of one (sequence n, value head hv). Every thread owns 16 columns
// of one row: kLanes = K / 16 lanes per row, column float4 c4 * kLanes + lane (c4 = 0..3), so one copy
// instruction of a row group covers kLanes * 16 contiguous bytes of the row. Row sums are 16-long FMA chains
// plus an xor-shuffle over the row group.
//
// Memory-level parallelism. Each thread issues its four 16-byte state copies (cp.async, global -> its own
// shared-memory slots) as soon as the slot index is known, before any preprocessing: 64 bytes per thread in
// flight without holding registers, so the preprocessing that runs meanwhile is free to use them. The state
// moves into registers only for the token loop and is stored from there (st.global.cs, 16 bytes per store).
//
// Ownership makes the in-place update safe: each state element (hv, row, col) of a sequence's slots is read and
// written by exactly one thread (sequences own disjoint slots), which waits for its own copies (cp.async.wait_all)
// before its first store, so a write slot equal to the read slot is never written before it is read.
//
// Staging. The per-token preprocessing is independent of the state. The raw q, k, g, v, beta and write slots of
// the first chunk are loaded before the state copies are issued; after them a stage group of min(K, 32) lanes per
// token forms q_hat and k_hat (L2 norms by shuffles) in shared memory, and then every thread activates gates
// and beta element by element. Tokens are staged kTok at a time (3 * kTok * K floats <= 12 KiB of dynamic shared
// memory, sized by min(T, kTok)).
//
// Per token and row: S *= alpha, u = beta (v - S k_hat), S += u k_hat^T, o = scale (S q_hat), then S goes to the
// token's write slot if it has one: the reference's order, with two row reductions per token.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common/math.h"
#include "common/params.h"
#include "cuda/cuda_backend.h"
#include "cuda/device_common.cuh"
#include "cuda/generic/decode_fusions.h"
#include "cuda/launch.h"

namespace kda::cuda {
namespace {

constexpr int kUnit = 64;      // threads per row unit
constexpr int kMaxUnits = 4;   // at most 256 threads per CTA
constexpr int kCols = 16;      // state columns per thread: four 16-byte copies in flight, 16 registers in use

template <int K>
struct Tile {
  static constexpr int kLanes = K / kCols;                 // lanes per row: 1, 2, 4, 8, 16 for K = 16 .. 256
  static constexpr int kRowsPerUnit = kUnit / kLanes;      // 64, 32, 16, 8, 4
  static constexpr int kTok = K >= 256 ? 4 : 8;            // staged tokens per chunk: 3 * kTok * K floats <= 12 KiB
  static constexpr int kStageLanes = K < 32 ? K : 32;      // lanes staging one token (aligned in a warp)
  static constexpr int kStageCols = K / kStageLanes;       // 1, 1, 2, 4, 8 raw q/k/g values per lane
  static constexpr int kVSlots = (kTok * kRowsPerUnit + kUnit - 1) / kUnit;  // v values per thread per chunk
  static_assert(kCols * kLanes == K && kLanes <= 32 && kUnit % kStageLanes == 0, "tile does not fit a warp");
};

// Asynchronous global -> shared copies (sm80+): the state tile goes in flight without holding registers while
// the preprocessing runs. .cg: 16-byte copies bypass L1 (the state is read once).
__device__ __forceinline__ void cp_async16(void* smem_dst, const void* gmem_src) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem_src));
}
__device__ __forceinline__ void cp_async4(void* smem_dst, const void* gmem_src) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(gmem_src));
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// An optimization barrier: the compiler can no longer treat x as loop-invariant.
__device__ __forceinline__ int opaque(int x) {
  asm volatile("" : "+r"(x));
  return x;
}

// The preprocessing of math.h without its divisions and square roots: those compile to slow-path calls, and
// every call site makes the compiler save (spill) what is live around it. The formulas are math.h's; only the
// roundings differ, by at most 2 ulp (__fdividef, valid for the denominators here: 1 + exp(-x) >= 1, where a
// denominator beyond 2^126 gives 0 for a sigmoid below 2^-126) or not at all (__frsqrt_rn rounds correctly).
__device__ __forceinline__ float sigmoid_f(float x) { return __fdividef(1.0f, 1.0f + expf(-x)); }

__device__ __forceinline__ float gate_log_decay_f(kda_gate_mode_t mode, float g, bool has_a_log, float a_log,
                                                  float bias, float lower_bound) {
  if (mode != KDA_GATE_BOUNDED) return gate_log_decay<float>(mode, g, has_a_log, a_log, bias, lower_bound);
  float x = g + bias;
  if (has_a_log && x != 0.0f) x *= expf(a_log);  // as math.h: x == 0 gives sigmoid(0) whatever A_log
  return lower_bound * sigmoid_f(x);
}

__device__ __forceinline__ float beta_activation_f(float b, bool is_logits, bool allow_neg_eigval) {
  const float r = is_logits ? sigmoid_f(b) : b;
  return allow_neg_eigval ? 2.0f * r : r;
}

// 1 / sqrt(sum x^2 + eps) of a token's q or k row spread over kLanes lanes (kN values each), math.h's
// l2_inv_norm. Where the sum of squares overflows (|x| beyond ~1e19) it is redone on x / m, m the power of two at
// or below max|x| (capped at 2^126 so that 1 / m is a normal float): the scaling is exact and a multiplication,
// and the result is (1 / m) / sqrt(sum (x / m)^2 + eps / m^2). All 32 lanes of the warp call it together.
template <int kLanes, int kN>
__device__ __forceinline__ float inv_norm(const float (&x)[kN]) {
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < kN; ++i) ss = fmaf(x[i], x[i], ss);
  ss = group_sum<kLanes>(ss);
  const bool finite = isfinite(ss);
  if (__all_sync(0xffffffffu, finite)) return __frsqrt_rn(ss + static_cast<float>(kL2NormEps));
  float mx = 0.0f;
#pragma unroll
  for (int i = 0; i < kN; ++i) mx = fmaxf(mx, fabsf(x[i]));
  // Rows with a finite ss (any max, even 0) take the plain formula; the others get m = 2^E in [1, 2^126].
  const uint32_t e = min(__float_as_uint(fmaxf(group_max<kLanes>(mx), 1.0f)) & 0x7f800000u, 0x7e800000u);
  const float inv_m = __uint_as_float(0x7f000000u - e);  // 2^-E exactly
  float s2 = 0.0f;
#pragma unroll
  for (int i = 0; i < kN; ++i) s2 = fmaf(x[i] * inv_m, x[i] * inv_m, s2);
  s2 = group_sum<kLanes>(s2);
  return finite ? __frsqrt_rn(ss + static_cast<float>(kL2NormEps))
                : inv_m * __frsqrt_rn(s2 + static_cast<float>(kL2NormEps) * inv_m * inv_m);
}

// What one thread stages: the q/k/g columns of one token (its stage group's), its share of the chunk's v values,
// and (threads tid < nt) token tid's beta and write slot.
template <int K>
struct Raw {
  uint32_t q[Tile<K>::kStageCols], k[Tile<K>::kStageCols], g[Tile<K>::kStageCols];
  uint32_t v[Tile<K>::kVSlots];
  uint32_t beta;
  int32_t w;
};

// Grid: x = (value head, row block) as hv * row_blocks + rb, sequence n = z * gridDim.y + y: one task per CTA and
// 32-bit index math (a loop over tasks would let the compiler hoist 64-bit per-thread offsets out of it, and a
// 64-bit division is a call). rows_cta = kRowsPerUnit * blockDim.x / 64; ntc = min(T, kTok) sizes the dynamic
// shared memory; vec: the pool allows 16-byte state accesses. Registers (sm_90a): 73 to 79 for K <= 128, 106 for
// K = 256, no spills; a __launch_bounds__ minimum of 3 or 4 CTAs per SM makes ptxas spill instead.
template <int K>
__global__ void __launch_bounds__(kUnit * kMaxUnits) decode_kernel(const DecodeParams p, int rows_cta,
                                                                     int row_blocks, int ntc, bool vec) {
  using Tl = Tile<K>;
  constexpr int L = Tl::kLanes, kTok = Tl::kTok, SL = Tl::kStageLanes, SC = Tl::kStageCols;
  constexpr int kVSlots = Tl::kVSlots;
  const ForwardParams& io = p.io;

  // Shared memory (floats):
  //   st_s   [4][nthreads] float4: the state tiles; thread tid's float4 c4 at c4 * nthreads + tid, so each thread
  //          reads back only what it copied itself and a warp's float4 accesses are consecutive;
  //   gate_s [K + 4]: the head's dt_bias, then A_log;
  //   q_s, k_s, a_s [ntc][K]: q_hat, k_hat and alpha = exp(g_log) of the chunk's tokens;
  //   v_s    [ntc][rows_cta]: v of the CTA's rows;
  //   per token [ntc] each: beta, write slot.
  extern __shared__ __align__(16) float smem[];
  const int nthreads = blockDim.x;
  float4* st_s = reinterpret_cast<float4*>(smem);
  float* gate_s = smem + kCols * nthreads;
  float* q_s = gate_s + K + 4;
  float* k_s = q_s + ntc * K;
  float* a_s = k_s + ntc * K;
  float* beta_s = a_s + ntc * K;
  int32_t* w_s = reinterpret_cast<int32_t*>(beta_s + ntc);
  float* v_s = reinterpret_cast<float*>(w_s + ntc);

  const int n_stage_groups = nthreads / SL;
  const int hv = static_cast<int>(blockIdx.x) / row_blocks;
  const int h = hv / io.group;
  const int row0 = (static_cast<int>(blockIdx.x) - hv * row_blocks) * rows_cta;
  // The thread's roles. They are re-derived from an opaque copy of threadIdx.x at the top of every chunk: otherwise
  // the compiler hoists the per-thread 64-bit offsets built from them out of the chunk loop and keeps them live
  // across all of it (spills at T <= kTok too, where that loop runs once).
  int tid, lane, rg, sg, sl, row;
  bool row_ok;
  auto derive_roles = [&] {
    tid = opaque(static_cast<int>(threadIdx.x));
    lane = tid % L;     // position in the row group
    rg = tid / L;       // row of the CTA this thread owns
    sg = tid / SL;      // stage group: token sg + j * n_stage_groups of the chunk
    sl = tid % SL;      // stage lane: columns sl + m * SL
    row = row0 + rg;
    row_ok = row < io.V;
  };
  derive_roles();
  const int64_t n = static_cast<int64_t>(blockIdx.z) * gridDim.y + blockIdx.y;
  if (n >= io.N) return;  // uniform over the CTA
  float* const pool = static_cast<float*>(p.pool);

  // First in the dependency chain: the slot (one or two dependent loads), then the state copies that need it.
  const int64_t slot = p.read_slot(n);

  auto out_offset = [&](int64_t t) {
    return n * io.out_stride[0] + t * io.out_stride[1] + hv * io.out_stride[2] + row * io.out_stride[3];
  };

  // q/k/g of token j0 + sg of the chunk at t0 (zero bits past the chunk: finite, never stored).
  Raw<K> raw;
  auto load_tok = [&](int64_t t0, int nt, int j0) {
    const int j = j0 + sg;
#pragma unroll
    for (int m = 0; m < SC; ++m) {
      const int64_t t = t0 + j, col = sl + m * SL;
      raw.q[m] = j < nt ? load_bits(io.q.data, io.q.dtype, n * io.q.stride[0] + t * io.q.stride[1] +
                                                               h * io.q.stride[2] + col * io.q.stride[3]) : 0u;
      raw.k[m] = j < nt ? load_bits(io.k.data, io.k.dtype, n * io.k.stride[0] + t * io.k.stride[1] +
                                                               h * io.k.stride[2] + col * io.k.stride[3]) : 0u;
      raw.g[m] = j < nt ? load_bits(io.g.data, io.g.dtype, n * io.g.stride[0] + t * io.g.stride[1] +
                                                               hv * io.g.stride[2] + col * io.g.stride[3]) : 0u;
    }
  };
  // v item i = tid + s * nthreads is (token i / rows_cta, CTA row i % rows_cta); rows past V read as zero. Every
  // field is assigned on every path: a value kept from the previous chunk would stay live across the loop.
  auto load_side = [&](int64_t t0, int nt) {
#pragma unroll
    for (int s = 0; s < kVSlots; ++s) {
      const int i = tid + s * nthreads;
      const int tok = i / rows_cta, r = row0 + i % rows_cta;
      raw.v[s] = tok < nt && r < io.V
                     ? load_bits(io.v.data, io.v.dtype, n * io.v.stride[0] + (t0 + tok) * io.v.stride[1] +
                                                            hv * io.v.stride[2] + r * io.v.stride[3])
                     : 0u;
    }
    raw.beta = tid < nt ? load_bits(io.beta.data, io.beta.dtype, n * io.beta.stride[0] +
                                                                     (t0 + tid) * io.beta.stride[1] +
                                                                     hv * io.beta.stride[2])
                        : 0u;
    raw.w = tid < nt ? static_cast<int32_t>(p.write_slot(n, t0 + tid)) : -1;
  };

  const int nt0 = static_cast<int>(min(io.T, int64_t{kTok}));
  load_tok(0, nt0, 0);
  load_side(0, nt0);

  if (slot < 0) {  // padding (uniform over the CTA): zero outputs, no slot touched
    if (lane == 0 && row_ok) {
#pragma unroll 1
      for (int64_t t = 0; t < io.T; ++t) store_out(io.out, io.out_dtype, out_offset(t), 0.0f);
    }
    return;
  }

  // The state tile: all of this thread's copies issued back to back, before any preprocessing; they hold no
  // registers while in flight. This thread is the only reader and writer of these pool elements (see the top).
  if (row_ok) {
    if (vec) {
      const float4* src = reinterpret_cast<const float4*>(pool + slot * p.pool_stride[0] + hv * p.pool_stride[1] +
                                                          static_cast<int64_t>(row) * p.pool_stride[2]);
#pragma unroll
      for (int c4 = 0; c4 < kCols / 4; ++c4) cp_async16(&st_s[c4 * nthreads + tid], src + c4 * L + lane);
    } else {
      // Strided pools: a rolled loop, so that 16 64-bit addresses are never live at once next to the raw inputs.
      const float* src = pool + io.state_offset(p.pool_stride, slot, hv, row, 0);
      const int64_t col_stride = io.state_v_first ? p.pool_stride[3] : p.pool_stride[2];
#pragma unroll 1
      for (int c = 0; c < kCols; ++c) {
        const int col = ((c / 4) * L + lane) * 4 + c % 4;
        cp_async4(reinterpret_cast<float*>(&st_s[(c / 4) * nthreads + tid]) + c % 4, src + col * col_stride);
      }
    }
  }

  // The head's gate parameters, after the state copies (each store waits for its load), ordered before their
  // first use by the barrier that opens each chunk's staging.
  for (int i = tid; i <= K; i += nthreads) {
    float x = 0.0f;
    if (i < K && io.gate_mode != KDA_GATE_LOG_DECAY)
      x = static_cast<const float*>(io.dt_bias.data)[hv * io.dt_bias.stride[0] + i * io.dt_bias.stride[1]];
    if (i == K && io.has_A_log()) x = static_cast<const float*>(io.A_log.data)[hv * io.A_log.stride[0]];
    gate_s[i] = x;
  }

  // Staging, first pass (per token, a stage group of SL lanes): q_hat, k_hat into q_s, k_s and the raw gate into
  // a_s. Every lane runs the shuffles (uniform trip counts); only tokens of the chunk are stored.
  auto stage_tok = [&](int nt, int j0) {
    const int j = j0 + sg;
    float q[SC], k[SC];
#pragma unroll
    for (int m = 0; m < SC; ++m) {
      q[m] = bits_to_float(raw.q[m], io.q.dtype);
      k[m] = bits_to_float(raw.k[m], io.k.dtype);
    }
    if (io.use_qk_l2norm) {
      const float inv_q = inv_norm<SL, SC>(q), inv_k = inv_norm<SL, SC>(k);
#pragma unroll
      for (int m = 0; m < SC; ++m) {
        q[m] *= inv_q;
        k[m] *= inv_k;
      }
    }
    if (j < nt) {
#pragma unroll
      for (int m = 0; m < SC; ++m) {
        const int col = sl + m * SL;
        q_s[j * K + col] = q[m];
        k_s[j * K + col] = k[m];
        a_s[j * K + col] = bits_to_float(raw.g[m], io.g.dtype);
      }
    }
  };
  auto stage_side = [&](int nt) {
#pragma unroll
    for (int s = 0; s < kVSlots; ++s) {
      const int i = tid + s * nthreads;
      if (i < nt * rows_cta) v_s[i] = bits_to_float(raw.v[s], io.v.dtype);
    }
    if (tid < nt) {
      beta_s[tid] = bits_to_float(raw.beta, io.beta.dtype);
      w_s[tid] = raw.w;
    }
  };
  // Second pass (per element, after a barrier): gate and beta activated in place, spread over all threads (at
  // T = 1 only one warp stages, and the gate is the transcendental-heavy part).
  auto activate = [&](int nt) {
    const bool has_a_log = io.has_A_log();
#pragma unroll 1
    for (int i = tid; i < nt * K; i += nthreads)
      // exp of a g_log <= 0 lies in [0, 1]: a gate of any depth gives 0, never NaN.
      a_s[i] = expf(gate_log_decay_f(io.gate_mode, a_s[i], has_a_log, gate_s[K], gate_s[i % K], io.lower_bound));
    if (tid < nt) beta_s[tid] = beta_activation_f(beta_s[tid], io.beta_is_logits, io.allow_neg_eigval);
  };

#pragma unroll 1
  for (int64_t t0 = 0; t0 < io.T; t0 += kTok) {
    const int nt = static_cast<int>(min(io.T - t0, int64_t{kTok}));
    derive_roles();
    if (t0 > 0) {  // later chunks (T > kTok): loads issued before the barrier, to overlap it
      load_tok(t0, nt, 0);
      load_side(t0, nt);
    }
    __syncthreads();  // every thread is done reading the previous chunk's stage
    stage_side(nt);
    stage_tok(nt, 0);
#pragma unroll 1
    for (int j0 = n_stage_groups; j0 < nt; j0 += n_stage_groups) {
      load_tok(t0, nt, j0);
      stage_tok(nt, j0);
    }
    __syncthreads();
    activate(nt);
    __syncthreads();

    // The state tile in registers for this chunk's tokens only: the first chunk waits for its copies; later
    // chunks (T > kTok) take it back from st_s, where the previous chunk parked it, so the state is never live
    // across the staging.
    if (t0 == 0) cp_async_wait_all();
    float S[kCols];
#pragma unroll
    for (int c4 = 0; c4 < kCols / 4; ++c4) {
      const float4 x = row_ok ? st_s[c4 * nthreads + tid] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      S[4 * c4 + 0] = x.x; S[4 * c4 + 1] = x.y; S[4 * c4 + 2] = x.z; S[4 * c4 + 3] = x.w;
    }

    // Per token and row: S *= alpha, u = beta (v - S k_hat), S += u k_hat^T, o = scale S q_hat. Lanes of a row
    // group read distinct float4s of a shared row: no bank conflicts.
#pragma unroll 1
    for (int tau = 0; tau < nt; ++tau) {
      const float4* a4 = reinterpret_cast<const float4*>(a_s + tau * K);
      const float4* k4 = reinterpret_cast<const float4*>(k_s + tau * K);
      const float4* q4 = reinterpret_cast<const float4*>(q_s + tau * K);
      float ak = 0.0f;
#pragma unroll
      for (int c4 = 0; c4 < kCols / 4; ++c4) {
        const float4 a4v = a4[c4 * L + lane], k4v = k4[c4 * L + lane];
        const float a[4] = {a4v.x, a4v.y, a4v.z, a4v.w}, k[4] = {k4v.x, k4v.y, k4v.z, k4v.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          S[4 * c4 + e] *= a[e];
          ak = fmaf(S[4 * c4 + e], k[e], ak);
        }
      }
      const float u = beta_s[tau] * (v_s[tau * rows_cta + rg] - group_sum<L>(ak));
      // k_hat is read again (through an opaque index, so the compiler does not keep the first read's 16
      // registers alive across the reduction): shared-memory reads are cheaper than the occupancy they cost.
      const float4* k4b = reinterpret_cast<const float4*>(k_s) + opaque(tau * (K / 4));
      float aq = 0.0f;
#pragma unroll
      for (int c4 = 0; c4 < kCols / 4; ++c4) {
        const float4 k4v = k4b[c4 * L + lane], q4v = q4[c4 * L + lane];
        const float k[4] = {k4v.x, k4v.y, k4v.z, k4v.w}, q[4] = {q4v.x, q4v.y, q4v.z, q4v.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          S[4 * c4 + e] = fmaf(u, k[e], S[4 * c4 + e]);
          aq = fmaf(S[4 * c4 + e], q[e], aq);
        }
      }
      const float sq = group_sum<L>(aq);
      if (lane == 0 && row_ok) store_out(io.out, io.out_dtype, out_offset(t0 + tau), io.scale * sq);

      const int64_t w = w_s[tau];
      if (w >= 0 && row_ok) {
        if (vec) {
          float4* dst = reinterpret_cast<float4*>(pool + w * p.pool_stride[0] + hv * p.pool_stride[1] +
                                                  static_cast<int64_t>(row) * p.pool_stride[2]);
#pragma unroll
          for (int c4 = 0; c4 < kCols / 4; ++c4)
            __stcs(dst + c4 * L + lane, make_float4(S[4 * c4], S[4 * c4 + 1], S[4 * c4 + 2], S[4 * c4 + 3]));
        } else {
          // Strided pools: the tile goes through this thread's own st_s entries and a rolled loop, so the 16
          // 64-bit addresses are never live at once next to the state (the register budget of the token loop).
#pragma unroll
          for (int c4 = 0; c4 < kCols / 4; ++c4)
            st_s[c4 * nthreads + tid] = make_float4(S[4 * c4], S[4 * c4 + 1], S[4 * c4 + 2], S[4 * c4 + 3]);
          float* dst = pool + io.state_offset(p.pool_stride, w, hv, row, 0);
          const int64_t col_stride = io.state_v_first ? p.pool_stride[3] : p.pool_stride[2];
#pragma unroll 1
          for (int c = 0; c < kCols; ++c) {
            const int col = ((c / 4) * L + lane) * 4 + c % 4;
            __stcs(dst + col * col_stride, reinterpret_cast<const float*>(&st_s[(c / 4) * nthreads + tid])[c % 4]);
          }
        }
      }
    }
    if (t0 + kTok < io.T) {
#pragma unroll
      for (int c4 = 0; c4 < kCols / 4; ++c4)
        st_s[c4 * nthreads + tid] = make_float4(S[4 * c4], S[4 * c4 + 1], S[4 * c4 + 2], S[4 * c4 + 3]);
    }
  }
}

// CTA size: grow from one unit while the grid keeps at least 8 CTAs per SM and the CTA's rows stay within V.
template <int K>
int choose_units(const DecodeParams& p, int sms) {
  constexpr int kRows = Tile<K>::kRowsPerUnit;
  auto tasks = [&](int units) {
    const int64_t rows = int64_t{kRows} * units;
    return p.io.N * p.io.HV * ((p.io.V + rows - 1) / rows);
  };
  int units = 1;
  while (units < kMaxUnits && kRows * units * 2 <= std::max(p.io.V, kRows) && tasks(units * 2) >= 8 * int64_t{sms})
    units *= 2;
  return units;
}

template <int K>
void launch(const DecodeParams& p, int sms, cudaStream_t stream) {
  using Tl = Tile<K>;
  const int units = choose_units<K>(p, sms);
  const int rows_cta = Tl::kRowsPerUnit * units;
  const int row_blocks = (p.io.V + rows_cta - 1) / rows_cta;
  const int ntc = static_cast<int>(std::min<int64_t>(p.io.T, Tl::kTok));
  // State tiles (64 bytes per thread), gate parameters and the stage: at most 16 + 1 + 13.4 KiB, under the
  // 48 KiB default.
  const size_t smem_floats = static_cast<size_t>(kCols) * kUnit * units + K + 4 +
                             static_cast<size_t>(ntc) * (3 * K + 2 + rows_cta);
  // 16-byte state accesses need value-first rows contiguous in K and every row start 16-byte aligned.
  const bool vec = p.io.state_v_first && p.pool_stride[3] == 1 && p.pool_stride[0] % 4 == 0 &&
                   p.pool_stride[1] % 4 == 0 && p.pool_stride[2] % 4 == 0 &&
                   reinterpret_cast<uintptr_t>(p.pool) % 16 == 0;
  const int64_t ny = std::min<int64_t>(p.io.N, 65535);
  const dim3 grid(static_cast<unsigned>(p.io.HV * row_blocks), static_cast<unsigned>(ny),
                  static_cast<unsigned>((p.io.N + ny - 1) / ny));
  decode_kernel<K><<<grid, kUnit * units, smem_floats * sizeof(float), stream>>>(p, rows_cta, row_blocks, ntc, vec);
}

}  // namespace

size_t decode_workspace_size(const DecodeParams& p) { return static_cast<size_t>(FusionLayout(p).bytes()); }

Status decode(const DecodeParams& p, void* workspace, size_t workspace_bytes, void* stream) {
  const ForwardParams& io = p.io;
  if (io.out_dtype == KDA_DTYPE_FLOAT64)
    return Status{KDA_STATUS_NOT_SUPPORTED, "out: float64 is only supported by KDA_BACKEND_REFERENCE"};
  if (io.K != 16 && io.K != 32 && io.K != 64 && io.K != 128 && io.K != 256)
    return make_status(KDA_STATUS_NOT_SUPPORTED, "q: head dim K = %d is not supported by the CUDA backend", io.K);
  const size_t need = decode_workspace_size(p);
  if (workspace_bytes < need)
    return make_status(KDA_STATUS_WORKSPACE_TOO_SMALL, "workspace_bytes: %zu given, %zu needed (fused conv/norm)",
                       workspace_bytes, need);
  if (need > 0 && (workspace == nullptr || reinterpret_cast<uintptr_t>(workspace) % 16 != 0))
    return make_status(KDA_STATUS_INVALID_ARGUMENT, "workspace: %zu bytes, 16-byte aligned, are needed (fused conv/norm)",
                       need);
  if (io.N == 0 || io.T == 0) return Status::Ok();  // no token: nothing is read or written

  return launch_on_device(io.device_id, "kda decode kernel launch", [&] {
    int sms = 0;
    cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, io.device_id);
    if (e != cudaSuccess) return e;
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    if (p.conv) {
      launch_decode_conv(p, workspace, sms, s);
      if ((e = cudaGetLastError()) != cudaSuccess) return e;
    }
    const DecodeParams inner = fusion_inner_params(p, workspace);
    switch (io.K) {
      case 16: launch<16>(inner, sms, s); break;
      case 32: launch<32>(inner, sms, s); break;
      case 64: launch<64>(inner, sms, s); break;
      case 128: launch<128>(inner, sms, s); break;
      default: launch<256>(inner, sms, s); break;
    }
    if (p.out_norm) {
      if ((e = cudaGetLastError()) != cudaSuccess) return e;
      launch_decode_norm(p, workspace, sms, s);
    }
    return cudaSuccess;
  });
}

}  // namespace kda::cuda
