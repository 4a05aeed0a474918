// forward_generic.cu: owns the portable sm80+ CUDA forward (KDA_BACKEND_CUDA_GENERIC): an exact token-by-token
// recurrent kernel (fp32 state in registers, fp32 math) and its host-side launch behind cuda_backend.h.
//
// Work split. One CTA of 128 threads owns kRowsPerCta rows of the V x K state of one (sequence n, value head hv);
// the grid is a flat list of (n, hv, row block) tasks, walked grid-stride so any N * HV fits. Inside the CTA a
// "row group" of kLanesPerRow lanes (an aligned part of one warp) holds kRows rows; each lane holds kCols columns
// of each of those rows in registers. S @ k and S @ q are kCols-long FMA chains per lane followed by an xor
// shuffle reduction over the row group, so a token needs no shared-memory reduction.
//
// Per token the CTA first stages the token's inputs into shared memory: raw q and k (their L2 norms are
// reduced later by each row group from the columns it reads anyway, which avoids a second barrier), the decay
// alpha = exp(g_log) computed once per CTA (the gate activation is the expensive part of the preprocessing),
// the CTA's slice of v and the activated beta. The stage is double-buffered, so one __syncthreads per token
// separates writing token i from reading it, and the global loads of token i + 1 (raw bits in registers) are
// issued before the barrier so their latency hides behind the update of token i.
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

constexpr int kThreads = 128;  // 4 warps: enough lanes to stage K <= 128 columns in one pass

// Register tiling per head dim K. kCols = 8 keeps the per-lane state at kRows * 8 floats (16 registers for
// K >= 64) plus 3 * 8 for the token's q, k and alpha, well under the 255-register limit without spills, while
// the row reductions stay short (log2(kLanesPerRow) <= 5 shuffles). K = 16 uses 4 columns so that a CTA covers
// 32 rows rather than 64 (fewer idle rows when V = 16). kRows = 2 for K >= 64 gives every lane two independent
// rows to interleave (the row reductions are latency chains); smaller K keep one row so that a CTA never spans
// more than 32 rows.
template <int K>
struct Tile {
  static constexpr int kCols = K == 16 ? 4 : 8;
  static constexpr int kLanesPerRow = K / kCols;  // 4, 4, 8, 16, 32 for K = 16 .. 256
  static constexpr int kRows = K >= 64 ? 2 : 1;
  static constexpr int kRowsPerCta = kThreads / kLanesPerRow * kRows;  // 32, 32, 32, 16, 8
  static constexpr int kColSlots = (K + kThreads - 1) / kThreads;     // columns a thread stages per token
  static_assert(kCols % 4 == 0 && kLanesPerRow <= 32 && kRows <= kLanesPerRow, "tile does not fit a warp");
};

// The q/k/v/g/beta dtypes are float32, float16 or bfloat16 (validated). Loads keep the raw bits so the
// prefetch does not wait on the load; the conversion happens when the token is staged.
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

// One rounding from fp32 to the output dtype (round to nearest even, as the host store_element does).
__device__ __forceinline__ void store_out(void* base, kda_dtype_t dtype, int64_t offset, float x) {
  switch (dtype) {
    case KDA_DTYPE_BFLOAT16:
      static_cast<__nv_bfloat16*>(base)[offset] = __float2bfloat16_rn(x);
      break;
    case KDA_DTYPE_FLOAT16: static_cast<__half*>(base)[offset] = __float2half_rn(x); break;
    default: static_cast<float*>(base)[offset] = x;
  }
}

__device__ __forceinline__ int64_t load_cu_seqlen(const TensorView& cu, int64_t i) {
  return cu.dtype == KDA_DTYPE_INT32 ? static_cast<const int32_t*>(cu.data)[i * cu.stride[0]]
                                     : static_cast<const int64_t*>(cu.data)[i * cu.stride[0]];
}

// Sum over the kLanes lanes of a row group (aligned, so xor partners stay inside the group).
template <int kLanes>
__device__ __forceinline__ float row_group_sum(float x) {
#pragma unroll
  for (int off = kLanes / 2; off > 0; off /= 2) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

// The raw bits of one token's inputs that this thread stages.
template <int K>
struct RawToken {
  uint32_t q[Tile<K>::kColSlots], k[Tile<K>::kColSlots], g[Tile<K>::kColSlots];
  uint32_t v, beta;
};

template <int K>
__global__ void __launch_bounds__(kThreads) recurrent_forward_kernel(const ForwardParams p, int64_t row_blocks,
                                                                    int64_t tasks) {
  using Tl = Tile<K>;
  constexpr int C = Tl::kCols, L = Tl::kLanesPerRow, R = Tl::kRows, kRowsPerCta = Tl::kRowsPerCta;
  constexpr int kSlots = Tl::kColSlots;

  // Staged token, double-buffered: 3 * 2 * K floats (6 KiB at K = 256) plus the v slice and beta.
  __shared__ __align__(16) float q_s[2][K];
  __shared__ __align__(16) float k_s[2][K];
  __shared__ __align__(16) float alpha_s[2][K];
  __shared__ float v_s[2][kRowsPerCta];
  __shared__ float beta_s[2];

  const int tid = threadIdx.x;
  const int lane_in_row = tid % L;
  const int row_group = tid / L;
  const bool stages_beta = tid == kThreads - 1;

  for (int64_t task = blockIdx.x; task < tasks; task += gridDim.x) {
    const int64_t rb = task % row_blocks;
    const int64_t nh = task / row_blocks;
    const int hv = static_cast<int>(nh % p.HV);
    const int64_t n = nh / p.HV;
    const int h = hv / p.group;
    const int row0 = static_cast<int>(rb) * kRowsPerCta;

    // The sequence's tokens. Device-resident cu_seqlens were not validated on the host; clamping them to
    // [0, T] keeps a malformed array from reading or writing outside the tensors.
    int64_t b = n, start = 0, len = p.T;
    if (p.has_cu_seqlens()) {
      b = 0;
      start = min(max(load_cu_seqlen(p.cu_seqlens, n), int64_t{0}), p.T);
      len = min(max(load_cu_seqlen(p.cu_seqlens, n + 1), start), p.T) - start;
    }

    // This thread's state: rows row0 + row_group * R + r, columns (i * L + lane_in_row) * 4 + e (float4 i of
    // the row interleaved across the group, so a group's shared-memory float4 reads hit distinct banks).
    float S[R][C];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int row = row0 + row_group * R + r;
#pragma unroll
      for (int c = 0; c < C; ++c) {
        const int col = ((c / 4) * L + lane_in_row) * 4 + c % 4;
        S[r][c] = p.has_initial_state() && row < p.V
                      ? static_cast<const float*>(p.initial_state.data)[p.state_offset(p.initial_state.stride, n,
                                                                                          hv, row, col)]
                      : 0.0f;
      }
    }

    // Staging roles: thread tid stages columns tid + s * kThreads of q, k and g, row row0 + tid of v (threads
    // below kRowsPerCta) and, the last thread, beta. Token-independent parts of the offsets are kept.
    const bool has_a_log = p.has_A_log();
    const float a_log = has_a_log ? static_cast<const float*>(p.A_log.data)[hv * p.A_log.stride[0]] : 0.0f;
    float bias[kSlots];
    int64_t q_off[kSlots], k_off[kSlots], g_off[kSlots];
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      const int col = tid + s * kThreads;
      bias[s] = p.gate_mode != KDA_GATE_LOG_DECAY && col < K
                    ? static_cast<const float*>(p.dt_bias.data)[hv * p.dt_bias.stride[0] + col * p.dt_bias.stride[1]]
                    : 0.0f;
      q_off[s] = b * p.q.stride[0] + h * p.q.stride[2] + col * p.q.stride[3];
      k_off[s] = b * p.k.stride[0] + h * p.k.stride[2] + col * p.k.stride[3];
      g_off[s] = b * p.g.stride[0] + hv * p.g.stride[2] + col * p.g.stride[3];
    }
    const bool stages_v = tid < kRowsPerCta && row0 + tid < p.V;
    const int64_t v_off = b * p.v.stride[0] + hv * p.v.stride[2] + (row0 + tid) * p.v.stride[3];
    const int64_t beta_off = b * p.beta.stride[0] + hv * p.beta.stride[2];

    // Rows past V (only when V < kRowsPerCta) stage v = 0 and are never stored.
    RawToken<K> raw{};
    auto load_token = [&](int64_t t) {
#pragma unroll
      for (int s = 0; s < kSlots; ++s) {
        if (tid + s * kThreads < K) {
          raw.q[s] = load_bits(p.q.data, p.q.dtype, q_off[s] + t * p.q.stride[1]);
          raw.k[s] = load_bits(p.k.data, p.k.dtype, k_off[s] + t * p.k.stride[1]);
          raw.g[s] = load_bits(p.g.data, p.g.dtype, g_off[s] + t * p.g.stride[1]);
        }
      }
      if (stages_v) raw.v = load_bits(p.v.data, p.v.dtype, v_off + t * p.v.stride[1]);
      if (stages_beta) raw.beta = load_bits(p.beta.data, p.beta.dtype, beta_off + t * p.beta.stride[1]);
    };
    if (len > 0) load_token(start);

    for (int64_t i = 0; i < len; ++i) {
      const int64_t t = start + i;
      const int buf = static_cast<int>(i & 1);

      // Stage token t. exp(g_log) of a g_log <= 0 lies in [0, 1]: a gate of any depth gives 0, never NaN.
#pragma unroll
      for (int s = 0; s < kSlots; ++s) {
        const int col = tid + s * kThreads;
        if (col < K) {
          q_s[buf][col] = bits_to_float(raw.q[s], p.q.dtype);
          k_s[buf][col] = bits_to_float(raw.k[s], p.k.dtype);
          const float g = bits_to_float(raw.g[s], p.g.dtype);
          alpha_s[buf][col] =
              expf(gate_log_decay<float>(p.gate_mode, g, has_a_log, a_log, bias[s], p.lower_bound));
        }
      }
      if (tid < kRowsPerCta) v_s[buf][tid] = bits_to_float(raw.v, p.v.dtype);
      if (stages_beta)
        beta_s[buf] = beta_activation<float>(bits_to_float(raw.beta, p.beta.dtype), p.beta_is_logits,
                                             p.allow_neg_eigval);
      if (i + 1 < len) load_token(t + 1);
      // Also orders this stage after every thread's reads of the same buffer two tokens ago.
      __syncthreads();

      float q[C], k[C], alpha[C];
#pragma unroll
      for (int c4 = 0; c4 < C / 4; ++c4) {
        const int f = c4 * L + lane_in_row;
        const float4 qv = reinterpret_cast<const float4*>(q_s[buf])[f];
        const float4 kv = reinterpret_cast<const float4*>(k_s[buf])[f];
        const float4 av = reinterpret_cast<const float4*>(alpha_s[buf])[f];
        q[4 * c4 + 0] = qv.x; q[4 * c4 + 1] = qv.y; q[4 * c4 + 2] = qv.z; q[4 * c4 + 3] = qv.w;
        k[4 * c4 + 0] = kv.x; k[4 * c4 + 1] = kv.y; k[4 * c4 + 2] = kv.z; k[4 * c4 + 3] = kv.w;
        alpha[4 * c4 + 0] = av.x; alpha[4 * c4 + 1] = av.y; alpha[4 * c4 + 2] = av.z; alpha[4 * c4 + 3] = av.w;
      }
      if (p.use_qk_l2norm) {
        // Each row group holds all K columns, so it reduces the norms itself (eps inside the root).
        float qq = 0.0f, kk = 0.0f;
#pragma unroll
        for (int c = 0; c < C; ++c) {
          qq = fmaf(q[c], q[c], qq);
          kk = fmaf(k[c], k[c], kk);
        }
        const float inv_q = 1.0f / sqrtf(row_group_sum<L>(qq) + static_cast<float>(kL2NormEps));
        const float inv_k = 1.0f / sqrtf(row_group_sum<L>(kk) + static_cast<float>(kL2NormEps));
#pragma unroll
        for (int c = 0; c < C; ++c) {
          q[c] *= inv_q;
          k[c] *= inv_k;
        }
      }
      const float beta = beta_s[buf];

      // Decay, then S @ k_hat.
      float sk[R];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float acc = 0.0f;
#pragma unroll
        for (int c = 0; c < C; ++c) {
          S[r][c] *= alpha[c];
          acc = fmaf(S[r][c], k[c], acc);
        }
        sk[r] = row_group_sum<L>(acc);
      }
      // Delta-rule write of u = beta * (v - S @ k_hat), then the read S @ q_hat of the updated state.
      float o[R];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float u = beta * (v_s[buf][row_group * R + r] - sk[r]);
        float acc = 0.0f;
#pragma unroll
        for (int c = 0; c < C; ++c) {
          S[r][c] = fmaf(u, k[c], S[r][c]);
          acc = fmaf(S[r][c], q[c], acc);
        }
        o[r] = row_group_sum<L>(acc);
      }
      // Every lane of the group has the sums; lane r stores row r (kRows <= kLanesPerRow).
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int row = row0 + row_group * R + r;
        if (lane_in_row == r && row < p.V)
          store_out(p.out, p.out_dtype,
                    b * p.out_stride[0] + t * p.out_stride[1] + hv * p.out_stride[2] + row * p.out_stride[3],
                    p.scale * o[r]);
      }
    }

    // Written by the thread that read the same entries of initial_state, so an in-place state update
    // (final_state aliasing initial_state with the same strides) is safe.
    if (p.has_final_state()) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int row = row0 + row_group * R + r;
        if (row >= p.V) continue;
#pragma unroll
        for (int c = 0; c < C; ++c) {
          const int col = ((c / 4) * L + lane_in_row) * 4 + c % 4;
          static_cast<float*>(p.final_state)[p.state_offset(p.final_state_stride, n, hv, row, col)] = S[r][c];
        }
      }
    }
    // The next task's first stage writes buffer 0, which slower threads may still be reading.
    __syncthreads();
  }
}

template <int K>
void launch(const ForwardParams& p, cudaStream_t stream) {
  constexpr int kRowsPerCta = Tile<K>::kRowsPerCta;
  const int64_t row_blocks = (p.V + kRowsPerCta - 1) / kRowsPerCta;
  const int64_t tasks = p.N * p.HV * row_blocks;
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(tasks, INT_MAX));
  recurrent_forward_kernel<K><<<grid, kThreads, 0, stream>>>(p, row_blocks, tasks);
}

Status cuda_error(const char* what, cudaError_t e) {
  return make_status(KDA_STATUS_CUDA_ERROR, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

}  // namespace

bool compiled_with_cuda() { return true; }

Status generic_forward_workspace_size(const ForwardParams&, size_t* bytes) {
  *bytes = 0;
  return Status::Ok();
}

Status generic_forward(const ForwardParams& p, void*, size_t, void* stream) {
  // float64 outputs are a reference-backend option only.
  if (p.out_dtype == KDA_DTYPE_FLOAT64)
    return Status{KDA_STATUS_NOT_SUPPORTED, "out: float64 is only supported by KDA_BACKEND_REFERENCE"};
  if (p.has_final_state() && p.final_state_dtype != KDA_DTYPE_FLOAT32)
    return Status{KDA_STATUS_NOT_SUPPORTED, "final_state: the CUDA backend writes float32 states only"};
  if (p.K != 16 && p.K != 32 && p.K != 64 && p.K != 128 && p.K != 256)
    return make_status(KDA_STATUS_NOT_SUPPORTED, "q: head dim K = %d is not supported by the CUDA backend", p.K);
  // No sequence, or only empty sequences and no final state: nothing to write.
  if (p.N == 0 || (p.T == 0 && !p.has_final_state())) return Status::Ok();

  int prev_device = 0;
  cudaError_t e = cudaGetDevice(&prev_device);
  if (e != cudaSuccess) return cuda_error("cudaGetDevice", e);
  if (prev_device != p.device_id && (e = cudaSetDevice(p.device_id)) != cudaSuccess)
    return cuda_error("cudaSetDevice", e);

  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (p.K) {
    case 16: launch<16>(p, s); break;
    case 32: launch<32>(p, s); break;
    case 64: launch<64>(p, s); break;
    case 128: launch<128>(p, s); break;
    default: launch<256>(p, s); break;
  }
  e = cudaGetLastError();

  if (prev_device != p.device_id) {
    const cudaError_t restore = cudaSetDevice(prev_device);
    if (e == cudaSuccess && restore != cudaSuccess) return cuda_error("cudaSetDevice (restoring the caller's device)", restore);
  }
  if (e != cudaSuccess) return cuda_error("kda generic forward kernel launch", e);
  return Status::Ok();
}

}  // namespace kda::cuda
