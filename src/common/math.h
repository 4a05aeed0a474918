// math.h: the operator's elementwise preprocessing (gate activations, beta, L2-norm epsilon), one definition
// for every backend, templated on the compute type (double for the reference, float elsewhere).
#pragma once

#include <cmath>

#include "common/params.h"

namespace kda {

constexpr double kL2NormEps = 1e-6;      // q_hat = q / sqrt(sum q^2 + eps), eps inside the root
constexpr double kSoftplusThreshold = 20;  // softplus(x) = x above this, as in PyTorch and FLA

template <typename T>
KDA_HOST_DEVICE T softplus(T x) {
  using std::exp;
  using std::log1p;
  return x > T(kSoftplusThreshold) ? x : log1p(exp(x));
}

// log(softplus(x)) without forming softplus(x) where it underflows (x < -20: softplus(x) = exp(x) to 1e-9).
template <typename T>
KDA_HOST_DEVICE T log_softplus(T x) {
  using std::exp;
  using std::log;
  using std::log1p;
  if (x > T(kSoftplusThreshold)) return log(x);
  if (x < -T(kSoftplusThreshold)) return x;
  return log(log1p(exp(x)));
}

template <typename T>
KDA_HOST_DEVICE T sigmoid(T x) {
  using std::exp;
  // exp(-x) overflows to inf for very negative x, giving exactly 0: the right limit, never NaN.
  return T(1) / (T(1) + exp(-x));
}

// sigmoid'(x) = sigmoid(x) sigmoid(-x). Never s (1 - s): 1 - s cancels once s is near 1 (fp32: relative error
// ~6e-8 / e^-x, 7% at x = 14, all of it from x ~ 17; float64 from x ~ 37), which the backward verifier's saturated
// bounded-gate probe caught in dg, dA_log and ddt_bias.
template <typename T>
KDA_HOST_DEVICE T sigmoid_grad(T x) {
  return sigmoid(x) * sigmoid(-x);
}

// The bounded gate's log-decay, lower_bound * sigmoid(exp(A_log) (g + bias)), with exp(A_log) given: gate_log_decay's
// KDA_GATE_BOUNDED case, for callers that compute exp(A_log) once per head instead of once per element (the same
// value: exp of the same a_log).
template <typename T>
KDA_HOST_DEVICE T bounded_gate(T g, T bias, bool has_a_log, T exp_a_log, T lower_bound) {
  T x = g + bias;
  if (has_a_log && x != T(0)) x *= exp_a_log;  // x == 0 gives sigmoid(0) whatever A_log: no inf * 0
  return lower_bound * sigmoid(x);
}

// Log-decay (natural log, <= 0) of one (token, value head, channel). a_log: A_log[hv] (ignored when
// !has_a_log); bias: dt_bias[hv, k]; lower_bound < 0 for the bounded gate.
template <typename T>
KDA_HOST_DEVICE T gate_log_decay(kda_gate_mode_t mode, T g, bool has_a_log, T a_log, T bias, T lower_bound) {
  using std::exp;
  switch (mode) {
    case KDA_GATE_SOFTPLUS:
      // exp(A_log) * softplus(x) as one exp of a sum: no inf * 0 when exp(A_log) overflows and softplus(x)
      // underflows (both finite inputs); an overflow to -inf is a full decay, exp(-inf) = 0, as in float64.
      return -exp(a_log + log_softplus(g + bias));
    case KDA_GATE_BOUNDED:
      return bounded_gate(g, bias, has_a_log, has_a_log ? exp(a_log) : T(1), lower_bound);
    case KDA_GATE_LOG_DECAY:
    default:
      return g;
  }
}

// 1 / sqrt(sum x^2 + eps) for a row whose sum of squares is ss and largest magnitude max_abs. When ss overflows
// (|x| beyond ~1e19 in fp32), the caller recomputes ss of x / max_abs and passes rescaled = true.
template <typename T>
KDA_HOST_DEVICE T l2_inv_norm(T ss, T max_abs, bool rescaled) {
  using std::sqrt;
#ifdef __CUDA_ARCH__
  // fp32 on the device: one MUFU.RSQ (2 ulp) instead of the IEEE square root and division and their slow paths,
  // which sit in every row loop that normalises q / k (the backward's gradient rows, the forward's phase 1).
  if constexpr (sizeof(T) == sizeof(float)) {
    if (!rescaled) return rsqrtf(ss + T(kL2NormEps));
    return (T(1) / max_abs) * rsqrtf(ss + T(kL2NormEps) / (max_abs * max_abs));
  }
#endif
  if (!rescaled) return T(1) / sqrt(ss + T(kL2NormEps));
  return (T(1) / max_abs) / sqrt(ss + T(kL2NormEps) / (max_abs * max_abs));
}

template <typename T>
KDA_HOST_DEVICE T beta_activation(T b, bool is_logits, bool allow_neg_eigval) {
  T r = is_logits ? sigmoid(b) : b;
  return allow_neg_eigval ? T(2) * r : r;
}

}  // namespace kda
