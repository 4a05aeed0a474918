// forward_generic.cu: owns the portable sm80+ CUDA forward (KDA_BACKEND_CUDA_GENERIC): an exact token-by-token
// recurrent kernel (fp32 state in registers, fp32 math) and its host-side launch behind cuda_backend.h.
//
// Work split. One CTA of 128 threads owns kRowsPerCta rows of the V x K state of one (sequence n, value head hv);
// the grid is a flat list of (n, hv, row block) tasks, walked grid-stride so any N * HV fits. Inside the CTA a
// "row group" of kLanesPerRow lanes (an aligned part of one warp) holds kRows rows; each lane holds kCols columns
// of each of those rows in registers. Row sums are kCols-long FMA chains per lane followed by an xor-shuffle
// reduction over the row group, so the recurrence itself needs no shared-memory reduction and no barrier.
//
// Staging. Nothing in a token's preprocessing depends on the state, so it is done kChunk tokens at a time, off
// the recurrence's dependency chain: the CTA loads the chunk's q, k, g, its v slice and beta, and writes to shared
// memory q_hat, k_hat, alpha = exp(g_log), k_hat . q_hat, v and the activated beta. The stage is
// double-buffered (one __syncthreads per chunk), and the global loads of chunk c + 1 (raw bits in registers)
// are issued before computing chunk c so their latency hides behind kChunk tokens of recurrence.
//
// Per token, each row does: S *= alpha (per column), s_k = S k_hat, s_q = S q_hat (both from the decayed S, so
// their reductions share shuffle rounds), u = beta (v - s_k), o = scale (s_q + u (k_hat . q_hat)), S += u k_hat^T.
// o is the reference's scale * (S_new q_hat) expanded through S_new = S + u k_hat^T: the same value, with one
// reduction round per token on the dependency chain instead of two.
//
// Prefix-cache checkpoints (state_checkpoints): each thread writes its own state entries, as for the final state,
// when the token count reaches the next checkpoint count of the sequence (common/checkpoints.h). That count is
// found on the device (offsets are read there, a warp-wide scan per distinct count), so a call needs no host sync
// and works inside a CUDA graph; without checkpoints the token loop pays one integer compare per token.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "common/checkpoints.h"
#include "common/math.h"
#include "common/params.h"
#include "cuda/cuda_backend.h"
#include "cuda/device_common.cuh"
#include "cuda/launch.h"

namespace kda::cuda {
namespace {

constexpr int kThreads = 128;  // 4 warps per CTA

// Tiling per head dim K.
//  Recurrence: kCols = 8 keeps the per-lane state at kRows * 8 floats (16 registers for K >= 64) plus 3 * 8 for
//  the token's q_hat, k_hat and alpha, with row reductions of log2(kLanesPerRow) <= 5 shuffle rounds. K = 16 uses
//  4 columns so that a CTA covers 32 rows rather than 64 (fewer idle rows when V = 16). kRows = 2 for K >= 64
//  gives every lane two independent rows to interleave in the reduction latency; smaller K keep one row so that
//  a CTA never spans more than 32 rows.
//  Staging: kChunk tokens per stage, 3 * kChunk * K floats of q_hat / k_hat / alpha per buffer (at most 12 KiB,
//  so the double buffer plus v, 10 to 29 KiB in all, stays under the 48 KiB of static shared memory);
//  kStageLanes lanes (aligned inside a warp) stage one token, kStageCols columns each, and reduce its norms with
//  shuffles. Registers: 72 to 146 per thread (state, the token's q/k/alpha, the prefetched raw chunk), no
//  spills, so 3 to 7 CTAs fit an SM.
template <int K>
struct Tile {
  static constexpr int kCols = K == 16 ? 4 : 8;
  static constexpr int kLanesPerRow = K / kCols;  // 4, 4, 8, 16, 32 for K = 16 .. 256
  static constexpr int kRows = K >= 64 ? 2 : 1;
  static constexpr int kRowsPerCta = kThreads / kLanesPerRow * kRows;  // 32, 32, 32, 16, 8
  static constexpr int kChunk = 1024 / K < 16 ? 1024 / K : 16;        // 16, 16, 16, 8, 4
  static constexpr int kStageLanes = kThreads / kChunk;               // 8, 8, 8, 16, 32
  static constexpr int kStageCols = K / kStageLanes;                  // 2, 4, 8, 8, 8
  static constexpr int kVItems = kChunk * kRowsPerCta;                // v values per chunk
  static constexpr int kVSlots = (kVItems + kThreads - 1) / kThreads;  // 4, 4, 4, 1, 1
  static_assert(kCols % 4 == 0 && kLanesPerRow <= 32 && kRows <= kLanesPerRow, "row tile does not fit a warp");
  static_assert(kStageLanes <= 32 && kThreads % kRowsPerCta == 0, "stage tile does not fit a warp");
};

// 1 / sqrt(sum x^2 + eps) of a row spread over kLanes lanes (kCols values each) whose sum of squares is ss. Where
// ss overflowed (|x| beyond ~1e19) the sum is redone on x / max|x|; the shuffles of that redo run on the whole
// warp whenever any of its rows needs it, and each row still takes its own formula, so a row's result never
// depends on its neighbours. Called by all 32 lanes of the warp together.
template <int kLanes, int kCols>
__device__ __forceinline__ float robust_inv_norm(const float (&x)[kCols], float ss) {
  const bool finite = isfinite(ss);
  if (__all_sync(0xffffffffu, finite)) return l2_inv_norm(ss, 0.0f, false);
  float m = 0.0f;
#pragma unroll
  for (int i = 0; i < kCols; ++i) m = fmaxf(m, fabsf(x[i]));
  m = fmaxf(group_max<kLanes>(m), 1e-30f);  // rows with a finite ss may be all zero: keep the division finite
  float s2 = 0.0f;
#pragma unroll
  for (int i = 0; i < kCols; ++i) s2 = fmaf(x[i] / m, x[i] / m, s2);
  s2 = group_sum<kLanes>(s2);
  return finite ? l2_inv_norm(ss, 0.0f, false) : l2_inv_norm(s2, m, true);
}

// The raw bits of one chunk's inputs that this thread stages.
template <int K>
struct RawChunk {
  uint32_t q[Tile<K>::kStageCols], k[Tile<K>::kStageCols], g[Tile<K>::kStageCols];
  uint32_t v[Tile<K>::kVSlots];
  uint32_t beta;
};

// Prefix-cache checkpoints of sequence n (len tokens) at token count `count`: calls write(j) for every entry j
// holding that count and returns the next count (kNoCheckpoint: none). Called by every thread of the CTA together
// (the counts are uniform). The offsets form splits the scan over the warp's lanes: each lane folds every 32nd
// entry, a ballot finds the entries to write and a shuffle reduction the next count; kda.h lets offsets come in
// any order and repeat, so no sorted order is assumed.
template <typename Write>
__device__ __forceinline__ int64_t checkpoint_event(const ForwardParams& p, int64_t n, int64_t len, int64_t count,
                                                    Write&& write) {
  if (p.ckpt_offsets.data == nullptr) {
    const int64_t j = interval_checkpoint_index(count, p.ckpt_interval, p.n_ckpt);
    if (j >= 0) write(j);
    return interval_next_checkpoint(p.ckpt_interval, p.n_ckpt, len, count);
  }
  const int lane = threadIdx.x % 32;
  int64_t best = kNoCheckpoint;
  for (int64_t j0 = 0; j0 < p.n_ckpt; j0 += 32) {
    const int64_t j = j0 + lane;
    const int64_t t = j < p.n_ckpt ? p.checkpoint_tokens(n, j) : int64_t{-1};
    unsigned hit = __ballot_sync(0xffffffffu, j < p.n_ckpt && t == count);
    best = checkpoint_fold_next(best, t, count, len);
    while (hit != 0u) {
      write(j0 + (__ffs(hit) - 1));
      hit &= hit - 1u;
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const int64_t other = __shfl_xor_sync(0xffffffffu, best, o);
    best = other < best ? other : best;
  }
  return best;
}

template <int K>
__global__ void __launch_bounds__(kThreads) recurrent_forward_kernel(const ForwardParams p, int64_t row_blocks,
                                                                    int64_t tasks) {
  using Tl = Tile<K>;
  constexpr int C = Tl::kCols, L = Tl::kLanesPerRow, R = Tl::kRows, kRowsPerCta = Tl::kRowsPerCta;
  constexpr int kChunk = Tl::kChunk, kStageLanes = Tl::kStageLanes, kStageCols = Tl::kStageCols;
  constexpr int kVItems = Tl::kVItems, kVSlots = Tl::kVSlots;

  // The staged chunk, double-buffered (at most 2 * (12 + 2) KiB).
  __shared__ __align__(16) float q_s[2][kChunk][K];
  __shared__ __align__(16) float k_s[2][kChunk][K];
  __shared__ __align__(16) float alpha_s[2][kChunk][K];
  __shared__ float v_s[2][kVItems];  // [token][row of the CTA]
  __shared__ float kq_s[2][kChunk];
  __shared__ float beta_s[2][kChunk];

  const int tid = threadIdx.x;
  const int lane_in_row = tid % L;
  const int row_group = tid / L;
  // Staging role: token st_tok of the chunk, columns st_lane + m * kStageLanes.
  const int st_tok = tid / kStageLanes;
  const int st_lane = tid % kStageLanes;

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

    // This thread's state: rows row0 + row_group * R + r, columns (c4 * L + lane_in_row) * 4 + e (float4 c4 of
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

    const bool has_a_log = p.has_A_log();
    const float a_log = has_a_log ? static_cast<const float*>(p.A_log.data)[hv * p.A_log.stride[0]] : 0.0f;
    float bias[kStageCols];
#pragma unroll
    for (int m = 0; m < kStageCols; ++m)
      bias[m] = p.gate_mode != KDA_GATE_LOG_DECAY
                    ? static_cast<const float*>(p.dt_bias.data)[hv * p.dt_bias.stride[0] +
                                                                (st_lane + m * kStageLanes) * p.dt_bias.stride[1]]
                    : 0.0f;
    const int64_t q_base = b * p.q.stride[0] + h * p.q.stride[2] + st_lane * p.q.stride[3];
    const int64_t k_base = b * p.k.stride[0] + h * p.k.stride[2] + st_lane * p.k.stride[3];
    const int64_t g_base = b * p.g.stride[0] + hv * p.g.stride[2] + st_lane * p.g.stride[3];
    const int64_t v_base = b * p.v.stride[0] + hv * p.v.stride[2];
    const int64_t beta_base = b * p.beta.stride[0] + hv * p.beta.stride[2];

    // Loads the nt tokens of the chunk starting at t0. v item i is (token i / kRowsPerCta, CTA row
    // i % kRowsPerCta); the row of a slot is the same every chunk, so rows past V (V < kRowsPerCta) keep the
    // zero bits they start with and stay zero in the state's unused rows.
    RawChunk<K> raw{};
    auto load_chunk = [&](int64_t t0, int nt) {
      if (st_tok < nt) {
        const int64_t t = t0 + st_tok;
        load_bits_strided(raw.q, p.q.data, p.q.dtype, q_base + t * p.q.stride[1], kStageLanes * p.q.stride[3]);
        load_bits_strided(raw.k, p.k.data, p.k.dtype, k_base + t * p.k.stride[1], kStageLanes * p.k.stride[3]);
        load_bits_strided(raw.g, p.g.data, p.g.dtype, g_base + t * p.g.stride[1], kStageLanes * p.g.stride[3]);
      }
#pragma unroll
      for (int s = 0; s < kVSlots; ++s) {
        const int item = tid + s * kThreads;
        const int tok = item / kRowsPerCta, row = row0 + item % kRowsPerCta;
        if (item < kVItems && tok < nt && row < p.V)
          raw.v[s] = load_bits(p.v.data, p.v.dtype, v_base + (t0 + tok) * p.v.stride[1] + row * p.v.stride[3]);
      }
      if (tid < nt) raw.beta = load_bits(p.beta.data, p.beta.dtype, beta_base + (t0 + tid) * p.beta.stride[1]);
    };

    // Preprocesses the loaded chunk into buffer buf. Slots past the chunk's end hold stale finite values and
    // are never read.
    auto stage_chunk = [&](int buf) {
      float q[kStageCols], k[kStageCols], g[kStageCols];
      bits_to_float(q, raw.q, p.q.dtype);
      bits_to_float(k, raw.k, p.k.dtype);
      bits_to_float(g, raw.g, p.g.dtype);
      if (p.use_qk_l2norm) {
        float qq = 0.0f, kk = 0.0f;
#pragma unroll
        for (int m = 0; m < kStageCols; ++m) {
          qq = fmaf(q[m], q[m], qq);
          kk = fmaf(k[m], k[m], kk);
        }
        const float inv_q = robust_inv_norm<kStageLanes, kStageCols>(q, group_sum<kStageLanes>(qq));
        const float inv_k = robust_inv_norm<kStageLanes, kStageCols>(k, group_sum<kStageLanes>(kk));
#pragma unroll
        for (int m = 0; m < kStageCols; ++m) {
          q[m] *= inv_q;
          k[m] *= inv_k;
        }
      }
      float kq = 0.0f;
#pragma unroll
      for (int m = 0; m < kStageCols; ++m) {
        const int col = st_lane + m * kStageLanes;
        q_s[buf][st_tok][col] = q[m];
        k_s[buf][st_tok][col] = k[m];
        // exp of a g_log <= 0 lies in [0, 1]: a gate of any depth gives 0, never NaN.
        alpha_s[buf][st_tok][col] =
            expf(gate_log_decay<float>(p.gate_mode, g[m], has_a_log, a_log, bias[m], p.lower_bound));
        kq = fmaf(k[m], q[m], kq);
      }
      kq = group_sum<kStageLanes>(kq);
      if (st_lane == 0) kq_s[buf][st_tok] = kq;
#pragma unroll
      for (int s = 0; s < kVSlots; ++s) {
        const int item = tid + s * kThreads;
        if (item < kVItems) v_s[buf][item] = bits_to_float(raw.v[s], p.v.dtype);
      }
      if (tid < kChunk)
        beta_s[buf][tid] = beta_activation<float>(bits_to_float(raw.beta, p.beta.dtype), p.beta_is_logits,
                                                  p.allow_neg_eigval);
    };

    // Prefix-cache checkpoints: next_ckpt is the next token count (from the sequence start) whose state is
    // written; kNoCheckpoint without checkpoints. The token loop compares its count with a per-chunk 32-bit copy
    // (ckpt_tau: the token index + 1 inside the chunk, 0: none in this chunk), one uniform branch per token.
    // The empty asm makes the strides opaque, so the compiler computes the R * C addresses when it writes rather
    // than hoisting them out of the token loop into registers (that cost 40+ registers per thread).
    auto write_checkpoint = [&](int64_t j) {
      int64_t row_stride = p.state_v_first ? p.ckpt_stride[3] : p.ckpt_stride[4];
      int64_t col_stride = p.state_v_first ? p.ckpt_stride[4] : p.ckpt_stride[3];
      asm volatile("" : "+l"(row_stride), "+l"(col_stride));
      float* ck = static_cast<float*>(p.ckpt) + n * p.ckpt_stride[0] + j * p.ckpt_stride[1] + hv * p.ckpt_stride[2];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int row = row0 + row_group * R + r;
        if (row >= p.V) continue;
#pragma unroll
        for (int c = 0; c < C; ++c) {
          const int col = ((c / 4) * L + lane_in_row) * 4 + c % 4;
          ck[row * row_stride + col * col_stride] = S[r][c];
        }
      }
    };
    int64_t next_ckpt = kNoCheckpoint;
    if (p.has_checkpoints()) next_ckpt = checkpoint_event(p, n, len, 0, write_checkpoint);  // count 0: h0

    const int64_t chunks = (len + kChunk - 1) / kChunk;
    if (chunks > 0) load_chunk(start, static_cast<int>(min(len, int64_t{kChunk})));
    for (int64_t ci = 0; ci < chunks; ++ci) {
      const int64_t t0 = start + ci * kChunk;
      const int nt = static_cast<int>(min(len - ci * kChunk, int64_t{kChunk}));
      const int buf = static_cast<int>(ci & 1);
      stage_chunk(buf);
      if (ci + 1 < chunks) load_chunk(t0 + kChunk, static_cast<int>(min(len - (ci + 1) * kChunk, int64_t{kChunk})));
      // Also orders this stage after every thread's reads of the same buffer two chunks ago.
      __syncthreads();

      const int64_t done = ci * kChunk;  // tokens before this chunk
      int ckpt_tau = next_ckpt - done <= nt ? static_cast<int>(next_ckpt - done) : 0;
      for (int tau = 0; tau < nt; ++tau) {
        float q[C], k[C], alpha[C];
#pragma unroll
        for (int c4 = 0; c4 < C / 4; ++c4) {
          const int f = c4 * L + lane_in_row;
          const float4 qv = reinterpret_cast<const float4*>(q_s[buf][tau])[f];
          const float4 kv = reinterpret_cast<const float4*>(k_s[buf][tau])[f];
          const float4 av = reinterpret_cast<const float4*>(alpha_s[buf][tau])[f];
          q[4 * c4 + 0] = qv.x; q[4 * c4 + 1] = qv.y; q[4 * c4 + 2] = qv.z; q[4 * c4 + 3] = qv.w;
          k[4 * c4 + 0] = kv.x; k[4 * c4 + 1] = kv.y; k[4 * c4 + 2] = kv.z; k[4 * c4 + 3] = kv.w;
          alpha[4 * c4 + 0] = av.x; alpha[4 * c4 + 1] = av.y; alpha[4 * c4 + 2] = av.z; alpha[4 * c4 + 3] = av.w;
        }
        const float beta = beta_s[buf][tau], kq = kq_s[buf][tau];

        float sk[R], sq[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
          float ak = 0.0f, aq = 0.0f;
#pragma unroll
          for (int c = 0; c < C; ++c) {
            S[r][c] *= alpha[c];
            ak = fmaf(S[r][c], k[c], ak);
            aq = fmaf(S[r][c], q[c], aq);
          }
          sk[r] = group_sum<L>(ak);
          sq[r] = group_sum<L>(aq);
        }
        const int64_t out_base = b * p.out_stride[0] + (t0 + tau) * p.out_stride[1] + hv * p.out_stride[2];
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const int row = row0 + row_group * R + r;
          const float u = beta * (v_s[buf][tau * kRowsPerCta + row_group * R + r] - sk[r]);
#pragma unroll
          for (int c = 0; c < C; ++c) S[r][c] = fmaf(u, k[c], S[r][c]);
          // Every lane of the group has the sums; lane r stores row r (kRows <= kLanesPerRow).
          if (lane_in_row == r && row < p.V)
            store_out(p.out, p.out_dtype, out_base + row * p.out_stride[3], p.scale * fmaf(u, kq, sq[r]));
        }
        if (tau + 1 == ckpt_tau) {  // uniform over the CTA
          next_ckpt = checkpoint_event(p, n, len, done + tau + 1, write_checkpoint);
          ckpt_tau = next_ckpt - done <= nt ? static_cast<int>(next_ckpt - done) : 0;
        }
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

}  // namespace

bool compiled_with_cuda() { return true; }

Status generic_forward(const ForwardParams& p, void* stream) {
  // float64 outputs are a reference-backend option only.
  if (p.out_dtype == KDA_DTYPE_FLOAT64)
    return Status{KDA_STATUS_NOT_SUPPORTED, "out: float64 is only supported by KDA_BACKEND_REFERENCE"};
  if (p.has_final_state() && p.final_state_dtype != KDA_DTYPE_FLOAT32)
    return Status{KDA_STATUS_NOT_SUPPORTED, "final_state: the CUDA backend writes float32 states only"};
  if (p.K != 16 && p.K != 32 && p.K != 64 && p.K != 128 && p.K != 256)
    return make_status(KDA_STATUS_NOT_SUPPORTED, "q: head dim K = %d is not supported by the CUDA backend", p.K);
  if (p.has_checkpoints() && p.ckpt_dtype != KDA_DTYPE_FLOAT32)
    return Status{KDA_STATUS_NOT_SUPPORTED, "state_checkpoints: the CUDA backend writes float32 checkpoints only"};
  // No sequence, or only empty sequences and nothing to write (the initial state may be checkpointed at count 0).
  if (p.N == 0 || (p.T == 0 && !p.has_final_state() && !p.has_checkpoints())) return Status::Ok();

  return launch_on_device(p.device_id, "kda generic forward kernel launch", [&] {
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    switch (p.K) {
      case 16: launch<16>(p, s); break;
      case 32: launch<32>(p, s); break;
      case 64: launch<64>(p, s); break;
      case 128: launch<128>(p, s); break;
      default: launch<256>(p, s); break;
    }
    return cudaSuccess;
  });
}

}  // namespace kda::cuda
