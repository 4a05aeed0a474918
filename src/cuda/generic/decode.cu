// decode.cu: owns the CUDA decode (kda::cuda::decode of cuda_backend.h): T tokens per sequence against an fp32
// state pool read and written in place through slot indices.
//
// Decode is bound by streaming the state (V * K * 4 bytes per (sequence, value head) in, the same out), so the
// design is about bytes in flight and CTA count, not arithmetic.
//
// Work split. A CTA of 64 * units threads (units = 1, 2 or 4, chosen per call: 1 keeps small batches at >= 512
// CTAs for H = 32, K = V = 128; 4 amortizes the per-CTA preprocessing over 32 rows once the grid is large) owns
// kRowsPerUnit * units rows of the V x K state of one (sequence n, value head hv). Every thread owns 16 columns
// of one row: kLanes = K / 16 lanes per row, column float4 c4 * kLanes + lane (c4 = 0..3), so a row group's
// 16-byte loads cover kLanes * 16 contiguous bytes per instruction and the thread issues all four before any
// use: 64 bytes of state in flight per thread, 4 KiB per 64-thread unit. Row sums are 16-long FMA chains plus an
// xor-shuffle over the row group; the state never leaves registers between its load and its store.
//
// Ownership makes the in-place update safe: each state element (hv, row, col) of a sequence's slots is loaded
// and stored by exactly one thread (sequences own disjoint slots), which loads its whole tile from the read
// slot before its first store, so a write slot equal to the read slot is never written before it is read.
//
// Staging. The per-token preprocessing (q/k L2 norms, gate, beta) is independent of the state: the CTA issues
// the raw loads of the first chunk's q, k, g, v, beta and write slots, then the state loads, then converts the
// raw inputs into shared memory (q_hat, k_hat, alpha = exp(g_log), k_hat . q_hat, v, activated beta), so the
// preprocessing runs while the state is in flight. Tokens are staged kTok at a time (3 * kTok * K floats
// <= 12 KiB of dynamic shared memory, sized by min(T, kTok)); a stage group of min(K, 32) lanes does one token.
//
// Per token and row (as in forward_generic.cu): S *= alpha, s_k = S k_hat, s_q = S q_hat, u = beta (v - s_k),
// S += u k_hat^T, o = scale (s_q + u (k_hat . q_hat)) = scale (S_new q_hat); then S goes to the token's write
// slot if it has one.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "common/math.h"
#include "common/params.h"
#include "cuda/cuda_backend.h"

namespace kda::cuda {
namespace {

constexpr int kUnit = 64;      // threads per row unit
constexpr int kMaxUnits = 4;   // at most 256 threads per CTA
constexpr int kCols = 16;      // state columns per thread: four float4 loads in flight, 16 registers

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

// Raw bits of the float32 / float16 / bfloat16 inputs: loads are issued early and converted at staging.
__device__ __forceinline__ uint32_t load_bits(const void* base, kda_dtype_t dtype, int64_t offset) {
  if (dtype == KDA_DTYPE_FLOAT32) return static_cast<const uint32_t*>(base)[offset];
  return static_cast<const uint16_t*>(base)[offset];
}

__device__ __forceinline__ float bits_to_float(uint32_t bits, kda_dtype_t dtype) {
  switch (dtype) {
    case KDA_DTYPE_BFLOAT16: return __uint_as_float(bits << 16);
    case KDA_DTYPE_FLOAT16: return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
    default: return __uint_as_float(bits);
  }
}

// One rounding from fp32 to the output dtype (round to nearest even, as the host store does).
__device__ __forceinline__ void store_out(void* base, kda_dtype_t dtype, int64_t offset, float x) {
  switch (dtype) {
    case KDA_DTYPE_BFLOAT16: static_cast<__nv_bfloat16*>(base)[offset] = __float2bfloat16_rn(x); break;
    case KDA_DTYPE_FLOAT16: static_cast<__half*>(base)[offset] = __float2half_rn(x); break;
    default: static_cast<float*>(base)[offset] = x;
  }
}

// Sum / max over an aligned group of kLanes lanes (xor partners stay inside the group). All 32 lanes call it.
template <int kLanes>
__device__ __forceinline__ float group_sum(float x) {
#pragma unroll
  for (int off = kLanes / 2; off > 0; off /= 2) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

template <int kLanes>
__device__ __forceinline__ float group_max(float x) {
#pragma unroll
  for (int off = kLanes / 2; off > 0; off /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
  return x;
}

// 1 / sqrt(sum x^2 + eps) of a row spread over kLanes lanes whose sum of squares is ss; where ss overflowed the
// sum is redone on x / max|x| (math.h's l2_inv_norm). All 32 lanes of the warp call it together.
template <int kLanes, int kN>
__device__ __forceinline__ float robust_inv_norm(const float (&x)[kN], float ss) {
  const bool finite = isfinite(ss);
  if (__all_sync(0xffffffffu, finite)) return l2_inv_norm(ss, 0.0f, false);
  float m = 0.0f;
#pragma unroll
  for (int i = 0; i < kN; ++i) m = fmaxf(m, fabsf(x[i]));
  m = fmaxf(group_max<kLanes>(m), 1e-30f);  // rows with a finite ss may be all zero: keep the division finite
  float s2 = 0.0f;
#pragma unroll
  for (int i = 0; i < kN; ++i) s2 = fmaf(x[i] / m, x[i] / m, s2);
  s2 = group_sum<kLanes>(s2);
  return finite ? l2_inv_norm(ss, 0.0f, false) : l2_inv_norm(s2, m, true);
}

// What one thread stages: the q/k/g columns of one token (its stage group's), and its share of the chunk's
// v values, beta and write slots.
template <int K>
struct Raw {
  uint32_t q[Tile<K>::kStageCols], k[Tile<K>::kStageCols], g[Tile<K>::kStageCols];
  uint32_t v[Tile<K>::kVSlots];
  uint32_t beta;
  int32_t w;
};

// Grid: a flat list of (n, hv, row block) tasks walked grid-stride. rows_cta = kRowsPerUnit * blockDim.x / 64;
// ntc = min(T, kTok) sizes the dynamic shared memory; vec: the pool allows 16-byte state accesses.
template <int K>
__global__ void __launch_bounds__(kUnit * kMaxUnits) decode_kernel(const DecodeParams p, int rows_cta,
                                                                  int64_t row_blocks, int64_t tasks, int ntc,
                                                                  bool vec) {
  using Tl = Tile<K>;
  constexpr int L = Tl::kLanes, kTok = Tl::kTok, SL = Tl::kStageLanes, SC = Tl::kStageCols;
  constexpr int kVSlots = Tl::kVSlots;
  const ForwardParams& io = p.io;

  // Shared: q_hat, k_hat, alpha [ntc][K]; v [ntc][rows_cta]; beta, k_hat . q_hat, write slot [ntc].
  extern __shared__ __align__(16) float smem[];
  float* q_s = smem;
  float* k_s = q_s + ntc * K;
  float* a_s = k_s + ntc * K;
  float* v_s = a_s + ntc * K;
  float* beta_s = v_s + ntc * rows_cta;
  float* kq_s = beta_s + ntc;
  int32_t* w_s = reinterpret_cast<int32_t*>(kq_s + ntc);

  const int tid = threadIdx.x;
  const int nthreads = blockDim.x;
  const int lane = tid % L;     // position in the row group
  const int rg = tid / L;       // row of the CTA this thread owns
  const int sg = tid / SL;      // stage group: token sg + j * n_stage_groups of the chunk
  const int sl = tid % SL;      // stage lane: columns sl + m * SL
  const int n_stage_groups = nthreads / SL;
  float* const pool = static_cast<float*>(p.pool);

  for (int64_t task = blockIdx.x; task < tasks; task += gridDim.x) {
    const int64_t rb = task % row_blocks;
    const int64_t nh = task / row_blocks;
    const int hv = static_cast<int>(nh % io.HV);
    const int64_t n = nh / io.HV;
    const int h = hv / io.group;
    const int row0 = static_cast<int>(rb) * rows_cta;
    const int row = row0 + rg;
    const bool row_ok = row < io.V;
    const int64_t out_base = n * io.out_stride[0] + hv * io.out_stride[2] + row * io.out_stride[3];

    // First in the dependency chain: the slot (one or two dependent loads), then the state loads that need it.
    const int64_t slot = p.read_slot(n);

    const bool has_a_log = io.has_A_log();
    const bool gated = io.gate_mode != KDA_GATE_LOG_DECAY;
    const int64_t q_base = n * io.q.stride[0] + h * io.q.stride[2] + sl * io.q.stride[3];
    const int64_t k_base = n * io.k.stride[0] + h * io.k.stride[2] + sl * io.k.stride[3];
    const int64_t g_base = n * io.g.stride[0] + hv * io.g.stride[2] + sl * io.g.stride[3];
    const int64_t v_base = n * io.v.stride[0] + hv * io.v.stride[2];
    const int64_t beta_base = n * io.beta.stride[0] + hv * io.beta.stride[2];

    // q/k/g of token j0 + sg of the chunk at t0 (zero bits past the chunk: finite, never stored).
    Raw<K> raw{};
    auto load_tok = [&](int64_t t0, int nt, int j0) {
      const int j = j0 + sg;
#pragma unroll
      for (int m = 0; m < SC; ++m) {
        raw.q[m] = j < nt ? load_bits(io.q.data, io.q.dtype, q_base + (t0 + j) * io.q.stride[1] +
                                                                 m * SL * io.q.stride[3]) : 0u;
        raw.k[m] = j < nt ? load_bits(io.k.data, io.k.dtype, k_base + (t0 + j) * io.k.stride[1] +
                                                                 m * SL * io.k.stride[3]) : 0u;
        raw.g[m] = j < nt ? load_bits(io.g.data, io.g.dtype, g_base + (t0 + j) * io.g.stride[1] +
                                                                 m * SL * io.g.stride[3]) : 0u;
      }
    };
    // v item i = tid + s * nthreads is (token i / rows_cta, CTA row i % rows_cta); rows past V read as zero.
    auto load_side = [&](int64_t t0, int nt) {
#pragma unroll
      for (int s = 0; s < kVSlots; ++s) {
        const int i = tid + s * nthreads;
        const int tok = i / rows_cta, r = row0 + i % rows_cta;
        raw.v[s] = tok < nt && r < io.V
                       ? load_bits(io.v.data, io.v.dtype, v_base + (t0 + tok) * io.v.stride[1] + r * io.v.stride[3])
                       : 0u;
      }
      if (tid < nt) {
        raw.beta = load_bits(io.beta.data, io.beta.dtype, beta_base + (t0 + tid) * io.beta.stride[1]);
        raw.w = static_cast<int32_t>(p.write_slot(n, t0 + tid));
      }
    };

    const int nt0 = static_cast<int>(min(io.T, int64_t{kTok}));
    load_tok(0, nt0, 0);
    load_side(0, nt0);
    const float a_log = has_a_log ? static_cast<const float*>(io.A_log.data)[hv * io.A_log.stride[0]] : 0.0f;
    float bias[SC];
#pragma unroll
    for (int m = 0; m < SC; ++m)
      bias[m] = gated ? static_cast<const float*>(io.dt_bias.data)[hv * io.dt_bias.stride[0] +
                                                                   (sl + m * SL) * io.dt_bias.stride[1]]
                      : 0.0f;

    if (slot < 0) {  // padding (uniform over the CTA): zero outputs, no slot touched, no barrier
      if (lane == 0 && row_ok)
        for (int64_t t = 0; t < io.T; ++t) store_out(io.out, io.out_dtype, out_base + t * io.out_stride[1], 0.0f);
      continue;
    }

    // The state tile, all four (or sixteen scalar) loads issued back to back, evict-first: it is read once.
    float S[kCols];
    if (vec) {
      const float4* src = reinterpret_cast<const float4*>(
          pool + slot * p.pool_stride[0] + hv * p.pool_stride[1] + static_cast<int64_t>(row) * p.pool_stride[2]);
#pragma unroll
      for (int c4 = 0; c4 < kCols / 4; ++c4) {
        const float4 x = row_ok ? __ldcs(src + c4 * L + lane) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        S[4 * c4 + 0] = x.x; S[4 * c4 + 1] = x.y; S[4 * c4 + 2] = x.z; S[4 * c4 + 3] = x.w;
      }
    } else {
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        const int col = ((c / 4) * L + lane) * 4 + c % 4;
        S[c] = row_ok ? __ldcs(pool + io.state_offset(p.pool_stride, slot, hv, row, col)) : 0.0f;
      }
    }

    // Converts the raw q/k/g of token j0 + sg into q_hat, k_hat, alpha and k_hat . q_hat. Every lane runs the
    // shuffles (uniform trip counts); only tokens inside the chunk are stored.
    auto stage_tok = [&](int nt, int j0) {
      const int j = j0 + sg;
      float q[SC], k[SC];
#pragma unroll
      for (int m = 0; m < SC; ++m) {
        q[m] = bits_to_float(raw.q[m], io.q.dtype);
        k[m] = bits_to_float(raw.k[m], io.k.dtype);
      }
      if (io.use_qk_l2norm) {
        float qq = 0.0f, kk = 0.0f;
#pragma unroll
        for (int m = 0; m < SC; ++m) {
          qq = fmaf(q[m], q[m], qq);
          kk = fmaf(k[m], k[m], kk);
        }
        const float inv_q = robust_inv_norm<SL, SC>(q, group_sum<SL>(qq));
        const float inv_k = robust_inv_norm<SL, SC>(k, group_sum<SL>(kk));
#pragma unroll
        for (int m = 0; m < SC; ++m) {
          q[m] *= inv_q;
          k[m] *= inv_k;
        }
      }
      float kq = 0.0f;
#pragma unroll
      for (int m = 0; m < SC; ++m) kq = fmaf(k[m], q[m], kq);
      kq = group_sum<SL>(kq);
      if (j < nt) {
#pragma unroll
        for (int m = 0; m < SC; ++m) {
          const int col = sl + m * SL;
          q_s[j * K + col] = q[m];
          k_s[j * K + col] = k[m];
          // exp of a g_log <= 0 lies in [0, 1]: a gate of any depth gives 0, never NaN.
          a_s[j * K + col] = expf(gate_log_decay<float>(io.gate_mode, bits_to_float(raw.g[m], io.g.dtype),
                                                        has_a_log, a_log, bias[m], io.lower_bound));
        }
        if (sl == 0) kq_s[j] = kq;
      }
    };
    auto stage_side = [&](int nt) {
#pragma unroll
      for (int s = 0; s < kVSlots; ++s) {
        const int i = tid + s * nthreads;
        if (i < nt * rows_cta) v_s[i] = bits_to_float(raw.v[s], io.v.dtype);
      }
      if (tid < nt) {
        beta_s[tid] = beta_activation<float>(bits_to_float(raw.beta, io.beta.dtype), io.beta_is_logits,
                                             io.allow_neg_eigval);
        w_s[tid] = raw.w;
      }
    };

    for (int64_t t0 = 0; t0 < io.T; t0 += kTok) {
      const int nt = static_cast<int>(min(io.T - t0, int64_t{kTok}));
      if (t0 > 0) {  // later chunks (T > kTok): loads issued before the barrier, to overlap it
        load_tok(t0, nt, 0);
        load_side(t0, nt);
      }
      __syncthreads();  // every thread is done reading the previous chunk's (or task's) stage
      stage_side(nt);
      stage_tok(nt, 0);
      for (int j0 = n_stage_groups; j0 < nt; j0 += n_stage_groups) {
        load_tok(t0, nt, j0);
        stage_tok(nt, j0);
      }
      __syncthreads();

      for (int tau = 0; tau < nt; ++tau) {
        float kr[kCols];
        float ak = 0.0f, aq = 0.0f;
#pragma unroll
        for (int c4 = 0; c4 < kCols / 4; ++c4) {
          const int f = c4 * L + lane;  // lanes of a row group read distinct float4s: no bank conflicts
          const float4 a = reinterpret_cast<const float4*>(a_s + tau * K)[f];
          const float4 kv = reinterpret_cast<const float4*>(k_s + tau * K)[f];
          const float4 qv = reinterpret_cast<const float4*>(q_s + tau * K)[f];
          const float av[4] = {a.x, a.y, a.z, a.w}, kk[4] = {kv.x, kv.y, kv.z, kv.w}, qq[4] = {qv.x, qv.y, qv.z, qv.w};
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int c = 4 * c4 + e;
            S[c] *= av[e];
            ak = fmaf(S[c], kk[e], ak);
            aq = fmaf(S[c], qq[e], aq);
            kr[c] = kk[e];
          }
        }
        const float sk = group_sum<L>(ak), sq = group_sum<L>(aq);
        const float u = beta_s[tau] * (v_s[tau * rows_cta + rg] - sk);
#pragma unroll
        for (int c = 0; c < kCols; ++c) S[c] = fmaf(u, kr[c], S[c]);
        if (lane == 0 && row_ok)
          store_out(io.out, io.out_dtype, out_base + (t0 + tau) * io.out_stride[1], io.scale * fmaf(u, kq_s[tau], sq));

        const int64_t w = w_s[tau];
        if (w >= 0 && row_ok) {
          if (vec) {
            float4* dst = reinterpret_cast<float4*>(pool + w * p.pool_stride[0] + hv * p.pool_stride[1] +
                                                    static_cast<int64_t>(row) * p.pool_stride[2]);
#pragma unroll
            for (int c4 = 0; c4 < kCols / 4; ++c4)
              __stcs(dst + c4 * L + lane, make_float4(S[4 * c4], S[4 * c4 + 1], S[4 * c4 + 2], S[4 * c4 + 3]));
          } else {
#pragma unroll
            for (int c = 0; c < kCols; ++c) {
              const int col = ((c / 4) * L + lane) * 4 + c % 4;
              __stcs(pool + io.state_offset(p.pool_stride, w, hv, row, col), S[c]);
            }
          }
        }
      }
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
  const int64_t row_blocks = (p.io.V + rows_cta - 1) / rows_cta;
  const int64_t tasks = p.io.N * p.io.HV * row_blocks;
  const int ntc = static_cast<int>(std::min<int64_t>(p.io.T, Tl::kTok));
  const size_t smem = static_cast<size_t>(ntc) * (3 * K + rows_cta + 3) * sizeof(float);
  // 16-byte state accesses need value-first rows contiguous in K and every row start 16-byte aligned.
  const bool vec = p.io.state_v_first && p.pool_stride[3] == 1 && p.pool_stride[0] % 4 == 0 &&
                   p.pool_stride[1] % 4 == 0 && p.pool_stride[2] % 4 == 0 &&
                   reinterpret_cast<uintptr_t>(p.pool) % 16 == 0;
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(tasks, INT_MAX));
  decode_kernel<K><<<grid, kUnit * units, smem, stream>>>(p, rows_cta, row_blocks, tasks, ntc, vec);
}

Status cuda_error(const char* what, cudaError_t e) {
  return make_status(KDA_STATUS_CUDA_ERROR, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

}  // namespace

Status decode(const DecodeParams& p, void* stream) {
  const ForwardParams& io = p.io;
  if (io.out_dtype == KDA_DTYPE_FLOAT64)
    return Status{KDA_STATUS_NOT_SUPPORTED, "out: float64 is only supported by KDA_BACKEND_REFERENCE"};
  if (io.K != 16 && io.K != 32 && io.K != 64 && io.K != 128 && io.K != 256)
    return make_status(KDA_STATUS_NOT_SUPPORTED, "q: head dim K = %d is not supported by the CUDA backend", io.K);
  if (io.N == 0 || io.T == 0) return Status::Ok();  // no token: nothing is read or written

  int prev_device = 0;
  cudaError_t e = cudaGetDevice(&prev_device);
  if (e != cudaSuccess) return cuda_error("cudaGetDevice", e);
  if (prev_device != io.device_id && (e = cudaSetDevice(io.device_id)) != cudaSuccess)
    return cuda_error("cudaSetDevice", e);

  int sms = 0;
  e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, io.device_id);
  if (e == cudaSuccess) {
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    switch (io.K) {
      case 16: launch<16>(p, sms, s); break;
      case 32: launch<32>(p, sms, s); break;
      case 64: launch<64>(p, sms, s); break;
      case 128: launch<128>(p, sms, s); break;
      default: launch<256>(p, sms, s); break;
    }
    e = cudaGetLastError();
  }

  if (prev_device != io.device_id) {
    const cudaError_t restore = cudaSetDevice(prev_device);
    if (e == cudaSuccess && restore != cudaSuccess)
      return cuda_error("cudaSetDevice (restoring the caller's device)", restore);
  }
  if (e != cudaSuccess) return cuda_error("kda decode kernel launch", e);
  return Status::Ok();
}

}  // namespace kda::cuda
