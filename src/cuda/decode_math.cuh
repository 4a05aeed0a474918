// decode_math.cuh: the decode kernels' per-token math in fp32 (gate activation, beta, the q / k L2 norm over a lane
// group, a warp's row update), shared by the portable decode kernel (generic/decode.cu), the row-split one
// (generic/decode_rows.cu) and the sm_90 bulk-copy one (hopper/decode_bulk.cu), so all round the same way.
#pragma once

#include <cstdint>

#include "common/math.h"
#include "cuda/device_common.cuh"

namespace kda::cuda {

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

// gate_log_decay_f with exp(A_log) given (ea = expf(a_log), used only by the bounded gate with A_log), for a caller
// that computes it once per head instead of once per channel: the same value (math.h's bounded_gate).
__device__ __forceinline__ float gate_log_decay_f(kda_gate_mode_t mode, float g, bool has_a_log, float a_log,
                                                  float ea, float bias, float lower_bound) {
  if (mode != KDA_GATE_BOUNDED) return gate_log_decay<float>(mode, g, has_a_log, a_log, bias, lower_bound);
  float x = g + bias;
  if (has_a_log && x != 0.0f) x *= ea;
  return lower_bound * sigmoid_f(x);
}

__device__ __forceinline__ float beta_activation_f(float b, bool is_logits, bool allow_neg_eigval) {
  const float r = is_logits ? sigmoid_f(b) : b;
  return allow_neg_eigval ? 2.0f * r : r;
}

// inv_norm's overflow path, for a row whose sum of squares ss (already reduced over the group) is not finite on
// some lane of the warp; rows whose ss is finite get the plain formula.
template <int kLanes, int kN>
__device__ __forceinline__ float inv_norm_rescaled(const float (&x)[kN], float ss) {
  const bool finite = isfinite(ss);
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
  if (__all_sync(0xffffffffu, isfinite(ss))) return __frsqrt_rn(ss + static_cast<float>(kL2NormEps));
  return inv_norm_rescaled<kLanes, kN>(x, ss);
}

// inv_norm of two rows (a token's q and k) with their reductions interleaved: each butterfly stage's two shuffles
// are independent, so the pair costs about one reduction's latency, not two (the sm_90 decode's producer runs it on
// the small-batch critical path). The same sums in the same order, so the same values as two inv_norm calls.
template <int kLanes, int kN>
__device__ __forceinline__ void inv_norm2(const float (&x)[kN], const float (&y)[kN], float& inv_x, float& inv_y) {
  float sx = 0.0f, sy = 0.0f;
#pragma unroll
  for (int i = 0; i < kN; ++i) {
    sx = fmaf(x[i], x[i], sx);
    sy = fmaf(y[i], y[i], sy);
  }
#pragma unroll
  for (int off = kLanes / 2; off > 0; off /= 2) {
    sx += __shfl_xor_sync(0xffffffffu, sx, off);
    sy += __shfl_xor_sync(0xffffffffu, sy, off);
  }
  if (__all_sync(0xffffffffu, isfinite(sx) && isfinite(sy))) {
    inv_x = __frsqrt_rn(sx + static_cast<float>(kL2NormEps));
    inv_y = __frsqrt_rn(sy + static_cast<float>(kL2NormEps));
    return;
  }
  inv_x = inv_norm_rescaled<kLanes, kN>(x, sx);
  inv_y = inv_norm_rescaled<kLanes, kN>(y, sy);
}

// A token's vectors in a warp whose lane owns W channels of them: q and k scaled by their L2 norms (io.use_qk_l2norm;
// q's and k's reductions interleaved), g_log turned into alpha = exp(gate) in place. bias: the lane's channels of
// dt_bias; ea = exp(A_log), computed once per head by the caller.
template <int W>
__device__ __forceinline__ void token_vectors(const ForwardParams& io, float (&q)[W], float (&k)[W], float (&a)[W],
                                              bool has_a_log, float a_log, float ea, const float (&bias)[W]) {
  if (io.use_qk_l2norm) {
    float inv_q, inv_k;
    inv_norm2<32, W>(q, k, inv_q, inv_k);
#pragma unroll
    for (int m = 0; m < W; ++m) {
      q[m] *= inv_q;
      k[m] *= inv_k;
    }
  }
#pragma unroll
  for (int m = 0; m < W; ++m)  // exp of a g_log <= 0 lies in [0, 1]: a gate of any depth gives 0, never NaN.
    a[m] = expf(gate_log_decay_f(io.gate_mode, a[m], has_a_log, a_log, ea, bias[m], io.lower_bound));
}

// W consecutive floats (16-byte aligned for W >= 4, 8-byte for W = 2) in as few accesses as possible: a lane's
// channels of a state row in the warp-per-row decode kernels (hopper/decode_bulk.cu, generic/decode_rows.cu).
template <int W>
__device__ __forceinline__ void ld_vec(const float* p, float (&x)[W]) {
#pragma unroll
  for (int i = 0; i < W; i += (W >= 4 ? 4 : 2)) {
    if constexpr (W >= 4) {
      const float4 v = *reinterpret_cast<const float4*>(p + i);
      x[i] = v.x; x[i + 1] = v.y; x[i + 2] = v.z; x[i + 3] = v.w;
    } else {
      const float2 v = *reinterpret_cast<const float2*>(p + i);
      x[i] = v.x; x[i + 1] = v.y;
    }
  }
}
// The same as streaming stores (st.global.cs: the pool is not re-read by the call).
template <int W>
__device__ __forceinline__ void st_vec_streaming(float* p, const float (&x)[W]) {
#pragma unroll
  for (int i = 0; i < W; i += (W >= 4 ? 4 : 2)) {
    if constexpr (W >= 4)
      __stcs(reinterpret_cast<float4*>(p + i), make_float4(x[i], x[i + 1], x[i + 2], x[i + 3]));
    else
      __stcs(reinterpret_cast<float2*>(p + i), make_float2(x[i], x[i + 1]));
  }
}

// The same as plain stores (decode_bulk.cu: a state row into its shared-memory tile, for the tile's bulk store).
template <int W>
__device__ __forceinline__ void st_vec(float* p, const float (&x)[W]) {
#pragma unroll
  for (int i = 0; i < W; i += (W >= 4 ? 4 : 2)) {
    if constexpr (W >= 4)
      *reinterpret_cast<float4*>(p + i) = make_float4(x[i], x[i + 1], x[i + 2], x[i + 3]);
    else
      *reinterpret_cast<float2*>(p + i) = make_float2(x[i], x[i + 1]);
  }
}

// The same for a bf16 pool: W consecutive bf16 (W * 2 bytes, aligned to that) widened to fp32 (exact), and fp32
// rounded once to bf16 (to nearest even, as the host's store_element) for the store.
template <int W>
__device__ __forceinline__ void ld_vec(const __nv_bfloat16* p, float (&x)[W]) {
  static_assert(W == 2 || W == 4 || W == 8, "a lane's channels of a bf16 row");
  uint32_t w[W / 2];
  if constexpr (W == 8) {
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    w[0] = v.x; w[1] = v.y; w[2] = v.z; w[3] = v.w;
  } else if constexpr (W == 4) {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    w[0] = v.x; w[1] = v.y;
  } else {
    w[0] = *reinterpret_cast<const uint32_t*>(p);
  }
#pragma unroll
  for (int i = 0; i < W / 2; ++i) {
    x[2 * i] = __uint_as_float(w[i] << 16);
    x[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}
template <int W>
__device__ __forceinline__ void st_vec_streaming(__nv_bfloat16* p, const float (&x)[W]) {
  static_assert(W == 2 || W == 4 || W == 8, "a lane's channels of a bf16 row");
  uint32_t w[W / 2];
#pragma unroll
  for (int i = 0; i < W / 2; ++i) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(x[2 * i], x[2 * i + 1]);  // .x = x[2 i], the low half
    w[i] = *reinterpret_cast<const uint32_t*>(&h);
  }
  if constexpr (W == 8)
    __stcs(reinterpret_cast<uint4*>(p), make_uint4(w[0], w[1], w[2], w[3]));
  else if constexpr (W == 4)
    __stcs(reinterpret_cast<uint2*>(p), make_uint2(w[0], w[1]));
  else
    __stcs(reinterpret_cast<unsigned int*>(p), w[0]);
}

// The fused short convolution of one channel for one token (decode_fusions.cu's conv kernel, decode_head.cu's
// one-kernel form): acc = sum_j w[j] s[j] + w[3] x in the CPU backend's order (oldest input first), the channel's
// state s (its last 3 inputs) shifted to take x; returns SiLU(acc) = acc / (1 + exp(-acc)).
__device__ __forceinline__ float conv_token(const float (&w)[DecodeParams::kConvWidth],
                                            float (&s)[DecodeParams::kConvWidth - 1], float x) {
  constexpr int CW = DecodeParams::kConvWidth;
  float acc = 0.0f;
#pragma unroll
  for (int j = 0; j < CW - 1; ++j) acc = fmaf(w[j], s[j], acc);
  acc = fmaf(w[CW - 1], x, acc);
#pragma unroll
  for (int j = 0; j < CW - 2; ++j) s[j] = s[j + 1];
  s[CW - 2] = x;
  return acc / (1.0f + expf(-acc));
}

// A channel's conv state (3 inputs, exact in the state's dtype: fp32 or the inputs' own) to the pool at slot `ws`.
__device__ __forceinline__ void store_conv_state(const TensorView& cs, int64_t ws, int64_t ch,
                                                 const float (&s)[DecodeParams::kConvWidth - 1]) {
#pragma unroll
  for (int j = 0; j < DecodeParams::kConvWidth - 1; ++j)
    store_out(const_cast<void*>(cs.data), cs.dtype, ws * cs.stride[0] + ch * cs.stride[1] + j * cs.stride[2], s[j]);
}

// The default row sums: each row's own 5-step butterfly over the warp (R independent reductions, 5 R shuffles).
struct ButterflyRowSums {
  template <int R>
  __device__ __forceinline__ void operator()(float (&x)[R]) const {
#pragma unroll
    for (int r = 0; r < R; ++r) x[r] = group_sum<32>(x[r]);
  }
};

// One token's update of R state rows held by a warp, lane l owning W channels of each (alpha, k_hat, q_hat: the
// lane's channels of the token's vectors): per row S *= alpha, u = beta (v - S k_hat), S += u k_hat^T, the
// reference's order; the row sums of S k_hat reduced over the warp by row_sums (every lane gets every row's sum; by
// default R interleaved butterflies). v_of(r) gives row r's v where it is used (a caller converting raw bits there
// holds R fewer registers across the reductions).
// Leaves in qdot[r] this lane's part of row r's S q_hat (the caller stores the state, then reduces them).
template <int R, int W, typename VOf, typename RowSums = ButterflyRowSums>
__device__ __forceinline__ void update_rows(float (&st)[R][W], const float (&al)[W], const float (&kh)[W],
                                            const float (&qh)[W], VOf&& v_of, float beta, float (&qdot)[R],
                                            RowSums&& row_sums = RowSums{}) {
  float dot[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float acc = 0.0f;
#pragma unroll
    for (int m = 0; m < W; ++m) {
      st[r][m] *= al[m];
      acc = fmaf(st[r][m], kh[m], acc);
    }
    dot[r] = acc;
  }
  row_sums(dot);
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const float u = beta * (v_of(r) - dot[r]);
    float acc = 0.0f;
#pragma unroll
    for (int m = 0; m < W; ++m) {
      st[r][m] = fmaf(u, kh[m], st[r][m]);
      acc = fmaf(st[r][m], qh[m], acc);
    }
    qdot[r] = acc;
  }
}

}  // namespace kda::cuda
