// decode_head.cu: owns the one-kernel fused decode (kda::cuda::head_decode, decode_head.h): the causal short
// convolution of q / k / v with its conv-state pool, the decode update and the gated RMSNorm of the output in one
// kernel, one CTA per (sequence, head), where the value heads are not grouped (HV = H, Kimi-Linear's case).
//
// Why. Run as three kernels (decode_fusions.cu's conv, a decode kernel, its norm) the fusions cost two more launches
// in the chain and a round trip of q / k / v and the output through fp32 workspace: H32 B1 12.5 us against 5.1 plain,
// B256 +18.5% (bench/LEDGER.md, session 12, bulk kernel). They were separate because a head's q / k conv state is
// read by every CTA that holds rows of the head (and written in place once), and the norm needs all V outputs of a
// (token, head). Here one CTA holds all V rows of the head, so both are CTA-local.
//
// Phases. Warp w owns state rows w R .. w R + R - 1 (R = V / 16), lane l channels l W .. l W + W - 1 (W = K / 32), the
// state in registers, as in the row-split kernel (decode_rows.cu).
//   1  Every load of token 0 with the slot's index, as raw bits (its g / beta, the norm's gate and weight, q / k / v
//      without the conv, the conv channel's taps and input), then the warp's state rows straight into registers and
//      the conv channel's stored inputs as soon as the slot is known. (Loads converted where issued, and loads after
//      the conv's barrier, had put ~0.7 us more on H32 B1's chain: 8.31 -> 7.62 us, session 15.)
//   2  Conv (p.conv), while the state is in flight: thread c < 2 K + V owns channel c of [q | k | v] of the head. It
//      writes every token's conv'd input to shared memory xs[t][c] and the state after each token to that token's
//      write slot (decode_math.cuh conv_token / store_conv_state, as decode_fusions.cu's conv kernel). One owner per
//      channel, every read before its writes: in place is race-free. A barrier, then every warp reads its token
//      vectors from xs.
//   3  Per token: token vectors (norms, gate) and the update (decode_math.cuh: the other kernels' formulas), the state
//      to the token's write slot, the warp's R outputs by row reductions. Norm (p.out_norm): each warp's sum of
//      squares of its R outputs into shared memory, a barrier, every warp sums the 16 partials in warp order (the same
//      bits in every warp, and from run to run), out = o rsqrt(mean(o^2) + eps) weight act(gate), rounded once.
//
// Budget (K = V = 128): 512 threads, 8 rows x 4 channels = 32 state floats a lane, at most 128 registers (one CTA per
// SM by registers); shared memory 6.3 KB (xs for up to 4 tokens, the partials). One CTA holds a head's whole 64 KB
// fp32 state (32 KB bf16), so at large batches each SM streams one head at a time with its load, update and store
// phases serialized (the bulk kernel pipelines them across tiles): measured 573 us at H32 B256 against the three-kernel
// form's 363, so the dispatcher takes it only while its CTAs fit one wave (decode_head.h head_decode_preferred).
//
// Supported (head_decode_supported): conv or norm asked for, HV = H, K in {64, 128}, V in {64, 128}, 1-4 tokens per
// sequence, the row-split kernel's pool forms (value-first, contiguous rows, fp32 or bf16, 16-byte aligned slots and
// heads). Grouped heads and other shapes keep the three kernels.

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common/params.h"
#include "cuda/decode_math.cuh"
#include "cuda/device_common.cuh"
#include "cuda/generic/decode_head.h"

namespace kda::cuda {
namespace {

constexpr int kWarps = 16;
constexpr int kThreads = 32 * kWarps;
constexpr int kMaxTokens = 4;
constexpr int kMaxChannels = 2 * 128 + 128;  // 2 K + V at K = V = 128

// A token's inputs for one warp as raw bits: its lanes' channels of q / k (read only without the conv) and g, its R
// rows of v (without the conv), beta, and for the norm lane r's row of the output gate and the norm weight.
template <int W, int R>
struct TokenBits {
  uint32_t q[W], k[W], g[W], v[R], beta, gate, weight;
};

// K: head dim of q / k; R: state rows per warp (V = 16 R); P: the pool's element (float or __nv_bfloat16).
template <int K, int R, typename P>
__global__ void __launch_bounds__(kThreads, 1) decode_head_kernel(const DecodeParams p) {
  constexpr int W = K / 32, V = kWarps * R, kCh = 2 * K + V;
  static_assert(kCh <= kMaxChannels && kCh <= kThreads && R <= 32, "head tile");  // one conv channel a thread
  __shared__ float xs[kMaxTokens][kMaxChannels];  // conv'd q | k | v per token (p.conv)
  __shared__ float partial[kMaxTokens][kWarps];   // each warp's sum of squares of its outputs (p.out_norm)
  const ForwardParams& io = p.io;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int64_t n = blockIdx.x;
  const int h = static_cast<int>(blockIdx.y);  // = the value head (HV = H)
  const int T = static_cast<int>(io.T);        // 1 .. kMaxTokens
  const int r0 = warp * R;

  // Every load of token 0 goes out with the slot's index, before anything waits on it: a load whose value is used
  // where it is issued holds back every load behind it for a round trip (the first version loaded g, beta, the output
  // gate and the norm weight after the conv's barrier: 8.3 us at H32 B1, session 15).
  auto load_token = [&](int t, TokenBits<W, R>& b) {
    const int64_t lw = lane * W;
    load_bits_strided<W>(b.g, io.g.data, io.g.dtype,
                         n * io.g.stride[0] + t * io.g.stride[1] + h * io.g.stride[2] + lw * io.g.stride[3],
                         io.g.stride[3]);
    if (!p.conv) {
      load_bits_strided<W>(b.q, io.q.data, io.q.dtype,
                           n * io.q.stride[0] + t * io.q.stride[1] + h * io.q.stride[2] + lw * io.q.stride[3],
                           io.q.stride[3]);
      load_bits_strided<W>(b.k, io.k.data, io.k.dtype,
                           n * io.k.stride[0] + t * io.k.stride[1] + h * io.k.stride[2] + lw * io.k.stride[3],
                           io.k.stride[3]);
#pragma unroll
      for (int r = 0; r < R; ++r)
        b.v[r] = load_bits(io.v.data, io.v.dtype,
                           n * io.v.stride[0] + t * io.v.stride[1] + h * io.v.stride[2] + (r0 + r) * io.v.stride[3]);
    }
    b.beta = load_bits(io.beta.data, io.beta.dtype, n * io.beta.stride[0] + t * io.beta.stride[1] + h * io.beta.stride[2]);
    if (p.out_norm && lane < R) {
      const int row = r0 + lane;
      b.gate = load_bits(p.out_gate.data, p.out_gate.dtype, n * p.out_gate.stride[0] + t * p.out_gate.stride[1] +
                                                              h * p.out_gate.stride[2] + row * p.out_gate.stride[3]);
      b.weight = load_bits(p.norm_weight.data, p.norm_weight.dtype, row * p.norm_weight.stride[0]);
    }
  };
  const int32_t slot_index = p.read_index(n);
  TokenBits<W, R> tb;
  load_token(0, tb);
  // This thread's conv channel: tid of [q | k | v] of the head. Its taps and token 0's input go out now, its stored
  // inputs once the slot is known; all as raw bits, converted after (load_f converts where it loads: the first
  // version's eight dependent conv loads were ~4 us of B1's chain).
  constexpr int CW = DecodeParams::kConvWidth;
  const bool conv_lane = p.conv && tid < kCh;
  const int ci = tid < K ? 0 : tid < 2 * K ? 1 : 2;  // q, k, v
  const int col = tid - (ci == 0 ? 0 : ci == 1 ? K : 2 * K);
  const int64_t ch = int64_t{h} * (ci < 2 ? K : V) + col;  // channel of the [dim] conv tensors
  const TensorView& cx = ci == 0 ? io.q : ci == 1 ? io.k : io.v;
  const TensorView& cw = p.conv_w[ci];
  const TensorView& cs = p.conv_state[ci];
  auto x_offset = [&](int t) { return n * cx.stride[0] + t * cx.stride[1] + h * cx.stride[2] + col * cx.stride[3]; };
  uint32_t rtap[CW], rx0 = 0;
  if (conv_lane) {
    load_bits_strided<CW>(rtap, cw.data, cw.dtype, ch * cw.stride[0], cw.stride[1]);
    rx0 = load_bits(cx.data, cx.dtype, x_offset(0));
  }
  const bool has_a_log = io.has_A_log();
  const float a_log = has_a_log ? static_cast<const float*>(io.A_log.data)[h * io.A_log.stride[0]] : 0.0f;
  float bias[W];
#pragma unroll
  for (int m = 0; m < W; ++m)
    bias[m] = io.gate_mode != KDA_GATE_LOG_DECAY
                  ? static_cast<const float*>(io.dt_bias.data)[h * io.dt_bias.stride[0] +
                                                               (lane * W + m) * io.dt_bias.stride[1]]
                  : 0.0f;
  const int64_t slot = p.in_pool(slot_index);
  const int64_t out_base = n * io.out_stride[0] + h * io.out_stride[2];
  if (slot < 0) {  // padding (uniform over the CTA, before any barrier): zero outputs, no slot or conv state touched
    if (lane < R)
      for (int t = 0; t < T; ++t)
        store_out(io.out, io.out_dtype, out_base + t * io.out_stride[1] + (r0 + lane) * io.out_stride[3], 0.0f);
    return;
  }
  P* const pool = static_cast<P*>(p.pool);
  float st[R][W];
  {
    const P* const src = pool + slot * p.pool_stride[0] + h * p.pool_stride[1] + r0 * int64_t{K} + lane * W;
#pragma unroll
    for (int r = 0; r < R; ++r) ld_vec<W>(src + r * K, st[r]);
  }

  if (p.conv) {
    if (conv_lane) {
      uint32_t rst[CW - 1];
      load_bits_strided<CW - 1>(rst, cs.data, cs.dtype, slot * cs.stride[0] + ch * cs.stride[1], cs.stride[2]);
      float s[CW - 1], wc[CW];
      bits_to_float(s, rst, cs.dtype);
      bits_to_float(wc, rtap, cw.dtype);
      for (int t = 0; t < T; ++t) {
        xs[t][tid] = conv_token(wc, s, t == 0 ? bits_to_float(rx0, cx.dtype) : load_f(cx, x_offset(t)));
        const int64_t ws = p.write_slot(n, t);
        if (ws >= 0) store_conv_state(cs, ws, ch, s);
      }
    }
    __syncthreads();
  }

  const float ea = io.gate_mode == KDA_GATE_BOUNDED && has_a_log ? expf(a_log) : 1.0f;
  for (int t = 0; t < T; ++t) {
    if (t > 0) load_token(t, tb);
    float q[W], k[W], a[W], v[R];
    if (p.conv) {
#pragma unroll
      for (int m = 0; m < W; ++m) {
        q[m] = xs[t][lane * W + m];
        k[m] = xs[t][K + lane * W + m];
      }
#pragma unroll
      for (int r = 0; r < R; ++r) v[r] = xs[t][2 * K + r0 + r];
    } else {
      bits_to_float(q, tb.q, io.q.dtype);
      bits_to_float(k, tb.k, io.k.dtype);
      bits_to_float(v, tb.v, io.v.dtype);
    }
    bits_to_float(a, tb.g, io.g.dtype);
    const float beta_raw = bits_to_float(tb.beta, io.beta.dtype);
    token_vectors<W>(io, q, k, a, has_a_log, a_log, ea, bias);
    const float beta = beta_activation_f(beta_raw, io.beta_is_logits, io.allow_neg_eigval);

    float dot[R];
    update_rows<R, W>(st, a, k, q, [&](int r) { return v[r]; }, beta, dot);
    const int64_t w = p.write_slot(n, t);
    if (w >= 0) {  // this token's state to its write slot (1-D indices: the last token's only)
      P* const dst = pool + w * p.pool_stride[0] + h * p.pool_stride[1] + r0 * int64_t{K} + lane * W;
#pragma unroll
      for (int r = 0; r < R; ++r) st_vec_streaming<W>(dst + r * K, st[r]);
    }
    float mine = 0.0f;  // lane r keeps row r's output
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float o = group_sum<32>(dot[r]);
      if (lane == r) mine = o;
    }
    mine *= io.scale;
    const int64_t ob = out_base + t * io.out_stride[1] + (r0 + lane) * io.out_stride[3];
    if (!p.out_norm) {
      if (lane < R) store_out(io.out, io.out_dtype, ob, mine);
      continue;
    }
    // The gated RMSNorm over the head's V outputs (decode_fusions.cu's norm_kernel formula).
    const float ss = group_sum<32>(lane < R ? mine * mine : 0.0f);
    if (lane == 0) partial[t][warp] = ss;
    __syncthreads();
    float total = 0.0f;
#pragma unroll
    for (int j = 0; j < kWarps; ++j) total += partial[t][j];
    if (lane < R) {
      const float rs = 1.0f / sqrtf(total / static_cast<float>(V) + p.norm_eps);
      const float wt = bits_to_float(tb.weight, p.norm_weight.dtype);
      const float g = bits_to_float(tb.gate, p.out_gate.dtype);
      const float sg = 1.0f / (1.0f + expf(-g));
      const float act = p.norm_act == KDA_OUT_GATE_SIGMOID ? sg : g * sg;
      store_out(io.out, io.out_dtype, ob, mine * rs * wt * act);
    }
  }
}

template <int K, typename P>
void launch(const DecodeParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.io.N), static_cast<unsigned>(p.io.HV));
  if (p.io.V == 128)
    decode_head_kernel<K, 8, P><<<grid, kThreads, 0, stream>>>(p);
  else
    decode_head_kernel<K, 4, P><<<grid, kThreads, 0, stream>>>(p);
}

template <typename P>
void launch_pool(const DecodeParams& p, cudaStream_t stream) {
  if (p.io.K == 128)
    launch<128, P>(p, stream);
  else
    launch<64, P>(p, stream);
}

}  // namespace

bool head_decode_supported(const DecodeParams& p) {
  const ForwardParams& io = p.io;
  if (!p.conv && !p.out_norm) return false;
  if (io.HV != io.H || io.T < 1 || io.T > kMaxTokens || !io.state_v_first) return false;
  if ((io.K != 64 && io.K != 128) || (io.V != 64 && io.V != 128)) return false;
  if (p.pool_dtype != KDA_DTYPE_FLOAT32 && p.pool_dtype != KDA_DTYPE_BFLOAT16) return false;
  const int64_t per16 = p.pool_dtype == KDA_DTYPE_BFLOAT16 ? 8 : 4;  // elements in 16 bytes
  if (p.pool_stride[3] != 1 || p.pool_stride[2] != io.K || p.pool_stride[1] % per16 || p.pool_stride[0] % per16)
    return false;
  if (io.N > INT32_MAX || io.HV > 65535) return false;  // the grid's x and y
  return reinterpret_cast<uintptr_t>(p.pool) % 16 == 0;
}

void head_decode(const DecodeParams& p, cudaStream_t stream) {
  if (p.pool_dtype == KDA_DTYPE_BFLOAT16)
    launch_pool<__nv_bfloat16>(p, stream);
  else
    launch_pool<float>(p, stream);
}

}  // namespace kda::cuda
