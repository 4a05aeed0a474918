// decode_math.cuh: the decode kernels' per-token preprocessing in fp32 (gate activation, beta, the q / k L2 norm over
// a lane group), shared by the portable decode kernel (generic/decode.cu) and the sm_90 bulk-copy one
// (hopper/decode_bulk.cu), so both round the same way.
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

}  // namespace kda::cuda
