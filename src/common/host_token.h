// host_token.h: loads one (token, value head)'s inputs on the host and applies the operator's preprocessing
// (q/k L2 norm, gate activation, beta activation) in the compute type T. Shared by the reference (T = double)
// and the CPU backend (T = float) so both read the inputs by the same rules.
#pragma once

#include <algorithm>
#include <cmath>

#include "common/host_access.h"
#include "common/math.h"

namespace kda {

// dst[i] = element offset + i * stride of a tensor of dtype, for i < n; the dtype switch is outside the loop.
template <typename T>
inline void load_row(const void* base, kda_dtype_t dtype, int64_t offset, int64_t stride, int n, T* dst) {
  switch (dtype) {
    case KDA_DTYPE_FLOAT32: {
      const float* s = static_cast<const float*>(base) + offset;
      for (int i = 0; i < n; ++i) dst[i] = static_cast<T>(s[i * stride]);
      break;
    }
    case KDA_DTYPE_BFLOAT16: {
      const uint16_t* s = static_cast<const uint16_t*>(base) + offset;
      for (int i = 0; i < n; ++i) dst[i] = static_cast<T>(bf16_bits_to_float(s[i * stride]));
      break;
    }
    case KDA_DTYPE_FLOAT16: {
      const _Float16* s = static_cast<const _Float16*>(base) + offset;
      for (int i = 0; i < n; ++i) dst[i] = static_cast<T>(static_cast<float>(s[i * stride]));
      break;
    }
    default:
      for (int i = 0; i < n; ++i) dst[i] = static_cast<T>(load_element(base, dtype, offset + i * stride));
  }
}

template <typename T>
inline void l2_normalize(T* x, int n) {
  T ss = 0;
  for (int i = 0; i < n; ++i) ss += x[i] * x[i];
  T inv;
  if (std::isfinite(ss)) {
    inv = l2_inv_norm(ss, T(0), false);
  } else {  // the sum of squares overflowed: redo it on x / max|x|
    T m = 0;
    for (int i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
    ss = 0;
    for (int i = 0; i < n; ++i) ss += (x[i] / m) * (x[i] / m);
    inv = l2_inv_norm(ss, m, true);
  }
  for (int i = 0; i < n; ++i) x[i] *= inv;
}

// Preprocessed inputs of token (b, t) for value head hv. Any pointer may be null to skip that input.
template <typename T>
inline void load_token(const ForwardParams& p, int64_t b, int64_t t, int hv, T* q, T* k, T* v, T* g_log,
                       T* beta) {
  const int h = hv / p.group;
  if (q) {
    load_row(p.q.data, p.q.dtype, b * p.q.stride[0] + t * p.q.stride[1] + h * p.q.stride[2], p.q.stride[3], p.K, q);
    if (p.use_qk_l2norm) l2_normalize(q, p.K);
  }
  if (k) {
    load_row(p.k.data, p.k.dtype, b * p.k.stride[0] + t * p.k.stride[1] + h * p.k.stride[2], p.k.stride[3], p.K, k);
    if (p.use_qk_l2norm) l2_normalize(k, p.K);
  }
  if (v)
    load_row(p.v.data, p.v.dtype, b * p.v.stride[0] + t * p.v.stride[1] + hv * p.v.stride[2], p.v.stride[3], p.V, v);
  if (g_log) {
    load_row(p.g.data, p.g.dtype, b * p.g.stride[0] + t * p.g.stride[1] + hv * p.g.stride[2], p.g.stride[3], p.K,
             g_log);
    if (p.gate_mode != KDA_GATE_LOG_DECAY) {
      const bool has_a = p.has_A_log();
      const T a_log = has_a ? static_cast<T>(load_element(p.A_log.data, p.A_log.dtype, hv * p.A_log.stride[0])) : T(0);
      T bias[256];  // K <= 256 (validated); a row load keeps the gate loop free of per-element dtype tests
      load_row(p.dt_bias.data, p.dt_bias.dtype, hv * p.dt_bias.stride[0], p.dt_bias.stride[1], p.K, bias);
      const T lb = static_cast<T>(p.lower_bound);
      if (p.gate_mode == KDA_GATE_BOUNDED) {  // exp(A_log) once a row: the same value gate_log_decay forms
        using std::exp;
        const T exp_a = has_a ? exp(a_log) : T(1);
        for (int i = 0; i < p.K; ++i) g_log[i] = bounded_gate<T>(g_log[i], bias[i], has_a, exp_a, lb);
      } else {
        for (int i = 0; i < p.K; ++i) g_log[i] = gate_log_decay<T>(p.gate_mode, g_log[i], has_a, a_log, bias[i], lb);
      }
    }
  }
  if (beta) {
    T b0;
    load_row(p.beta.data, p.beta.dtype, b * p.beta.stride[0] + t * p.beta.stride[1] + hv * p.beta.stride[2], 1, 1, &b0);
    *beta = beta_activation<T>(b0, p.beta_is_logits, p.allow_neg_eigval);
  }
}

}  // namespace kda

namespace kda {

// Writes src[i] to element offset + i * stride of a tensor of dtype, for i < n (one rounding per element).
template <typename T>
inline void store_row(void* base, kda_dtype_t dtype, int64_t offset, int64_t stride, int n, const T* src) {
  switch (dtype) {
    case KDA_DTYPE_FLOAT32: {
      float* d = static_cast<float*>(base) + offset;
      for (int i = 0; i < n; ++i) d[i * stride] = static_cast<float>(src[i]);
      break;
    }
    case KDA_DTYPE_BFLOAT16: {
      uint16_t* d = static_cast<uint16_t*>(base) + offset;
      for (int i = 0; i < n; ++i) d[i * stride] = float_to_bf16_bits(static_cast<float>(src[i]));
      break;
    }
    default:
      for (int i = 0; i < n; ++i) store_element(base, dtype, offset + i * stride, static_cast<double>(src[i]));
  }
}

}  // namespace kda
