// backward.h: the float64 reference backward: the reverse of the token recurrence, gradients of every
// differentiable input given upstream gradients of the output and of the final state. The oracle every backward
// kernel will be judged by; itself checked against central finite differences (tests/cpu/test_backward.cpp).
#pragma once

#include <vector>

#include "api/status.h"
#include "common/params.h"

namespace kda::reference {

// Gradients in float64, contiguous, in the layouts of the inputs they belong to:
//   dq, dk [B, T, H, K] (summed over the value heads of a group), dv [B, T, HV, V], dg [B, T, HV, K] (of the raw
//   gate input, through the softplus or bounded activation), dbeta [B, T, HV] (of the raw beta, through the
//   sigmoid when it is logits), dA_log [HV] and ddt_bias [HV * K] (when the gate has them), dh0 with the shape of
//   the initial state (when present).
// Templated on the compute type; instantiated for double (the oracle).
// mag_*: the size of the sums behind the gradients that can cancel (the analogue of the forward's out_mag; the
// element-wise bound of tools/common/compare.h scales with it): mag_dbeta = sum_v |G k|_v (|v_v| + |S' k|_v), with
// |x|_v = sum_d |x_vd ...| taken term by term, and mag_dg = alpha |dg/dg_log| sum_v |S_{t-1}| (|G| + |dp k|), both
// through the same activation factors as the gradients; mag_ddt_bias and mag_dA_log sum mag_dg's terms over tokens.
template <typename T>
struct GradientsT {
  std::vector<T> dq, dk, dv, dg, dbeta, dA_log, ddt_bias, dh0;
  std::vector<T> mag_dbeta, mag_dg, mag_ddt_bias, mag_dA_log;
};
using Gradients = GradientsT<double>;

// dout: [B, T, HV, V] contiguous; dfinal: the final state's gradient in the state layout of p (contiguous
// [N, HV, ., .]) or null for none. p's out and final_state are not written. chunked: each sequence's reverse runs
// the CPU backend's chunked core (src/cpu/backward_cpu.h, float64 matrix products) instead of the token reverse;
// the loading and the chain rules are shared, and the mag_* sums are left empty (they belong to the oracle).
// key_scale: every normalized key k_hat scaled by it wherever the backward uses it (the verifier's central differences
// of the key norm's rounding, tools/common/verify.cpp; 1 otherwise).
template <typename T>
Status backward(const ForwardParams& p, const T* dout, const T* dfinal, GradientsT<T>* grads, bool chunked = false,
                double key_scale = 1.0);

}  // namespace kda::reference
