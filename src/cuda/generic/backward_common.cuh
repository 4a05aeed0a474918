// backward_common.cuh: device pieces both CUDA backwards share (the token-recurrent backward_generic.cu and the
// chunked backward_chunked.cu, chunk_grad.cu): the tensor checks, the L2 norm as the forward computes it, and the
// gate activation's backward. Their two finishing launches are backward_finish.cu's.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "api/status.h"
#include "common/backward_params.h"
#include "common/math.h"
#include "cuda/device_common.cuh"

namespace kda::cuda {
namespace {

// What both CUDA backwards require of the upstream and gradient tensors: fp32 dfinal_state, no fp64 gradients.
inline Status check_backward_tensors(const BackwardParams& bp) {
  if (bp.dfinal.data && bp.dfinal.dtype != KDA_DTYPE_FLOAT32)
    return Status{KDA_STATUS_NOT_SUPPORTED, "dfinal_state: the CUDA backward reads float32 only"};
  const GradView* grads[] = {&bp.dq, &bp.dk, &bp.dv, &bp.dg, &bp.dbeta, &bp.dA_log, &bp.ddt_bias, &bp.dh0};
  for (const GradView* g : grads)
    if (g->data && g->dtype == KDA_DTYPE_FLOAT64)
      return Status{KDA_STATUS_NOT_SUPPORTED, "gradients: float64 gradient tensors are KDA_BACKEND_REFERENCE only"};
  return Status::Ok();
}

// 1 / sqrt(sum x^2 + eps) of a K-vector spread over one warp (C values per lane), as the forward computes it:
// where the sum of squares overflows the sum is redone on x / max|x|. Called by all 32 lanes.
template <int C>
__device__ __forceinline__ float warp_inv_norm(const float (&x)[C]) {
  float ss = 0.0f;
#pragma unroll
  for (int c = 0; c < C; ++c) ss = fmaf(x[c], x[c], ss);
  ss = group_sum<32>(ss);
  if (isfinite(ss)) return l2_inv_norm(ss, 0.0f, false);
  float m = 0.0f;
#pragma unroll
  for (int c = 0; c < C; ++c) m = fmaxf(m, fabsf(x[c]));
  m = fmaxf(group_max<32>(m), 1e-30f);
  float s2 = 0.0f;
#pragma unroll
  for (int c = 0; c < C; ++c) s2 = fmaf(x[c] / m, x[c] / m, s2);
  return l2_inv_norm(group_sum<32>(s2), m, true);
}

// The L2 norm's backward over a row spread across a warp (C values a lane): d <- (d - x_hat (x_hat . d)) / |x|, from
// the normalized row x_hat and inv = 1 / |x| (warp_inv_norm's). Called by all 32 lanes.
template <int C>
__device__ __forceinline__ void l2_norm_backward(const float (&xh)[C], float inv, float (&d)[C]) {
  float dot = 0.0f;
#pragma unroll
  for (int c = 0; c < C; ++c) dot = fmaf(xh[c], d[c], dot);
  dot = group_sum<32>(dot);
#pragma unroll
  for (int c = 0; c < C; ++c) d[c] = (d[c] - xh[c] * dot) * inv;
}

// d/dx and d/dA_log of the gate activation applied to dg_log (the reference's gate_grad in fp32). A zero dg_log
// (a fully decayed channel: alpha = 0) gives exact zeros, never inf * 0. glog is read for the softplus gate only;
// sg(z) is sigmoid'(z) (math.h sigmoid_grad, or the chunked pass's ex2 / rcp form); mode is p.gate_mode, or the
// constant a specialised kernel was built for. ea = exp(A_log) (1 without A_log), which a caller forms once: the
// row loops calling this per channel had computed expf(A_log) per element (~10 instructions each, SASS).
template <class SigmoidGrad>
__device__ __forceinline__ void gate_grad(const ForwardParams& p, kda_gate_mode_t mode, float x, float ea,
                                          bool has_a, float glog, float dglog, float* dx, float* dA, SigmoidGrad sg) {
  *dx = 0.0f;
  *dA = 0.0f;
  if (dglog == 0.0f) return;
  switch (mode) {
    case KDA_GATE_SOFTPLUS:  // g_log = -exp(A) softplus(x): d/dx = -exp(A) sigmoid(x), d/dA = g_log
      *dx = -dglog * (ea * sigmoid(x));
      *dA = dglog * glog;
      break;
    case KDA_GATE_BOUNDED: {  // g_log = lb sigmoid(z), z = exp(A) x (or x)
      const float z = x == 0.0f ? 0.0f : ea * x;
      const float dz = dglog * p.lower_bound * sg(z);
      if (dz != 0.0f) {
        *dx = dz * ea;
        *dA = has_a ? dz * z : 0.0f;
      }
      break;
    }
    default:
      *dx = dglog;
  }
}
__device__ __forceinline__ void gate_grad(const ForwardParams& p, float x, float a_log, bool has_a, float glog,
                                          float dglog, float* dx, float* dA) {
  gate_grad(p, p.gate_mode, x, has_a ? expf(a_log) : 1.0f, has_a, glog, dglog, dx, dA,
            [](float z) { return sigmoid_grad(z); });
}

}  // namespace
}  // namespace kda::cuda
