// backward_common.cuh: device pieces both CUDA backwards share (the token-recurrent backward_generic.cu and the
// chunked backward_chunked.cu): the tensor checks, the L2 norm as the forward computes it, the gate activation's
// backward, and the two finishing kernels (dq / dk summed over a value-head group through the L2 norm's backward;
// ddt_bias / dA_log summed from per-row partials in a fixed order).
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

// d/dx and d/dA_log of the gate activation applied to dg_log (the reference's gate_grad in fp32). A zero dg_log
// (a fully decayed channel: alpha = 0) gives exact zeros, never inf * 0.
__device__ __forceinline__ void gate_grad(const ForwardParams& p, float x, float a_log, bool has_a, float glog,
                                          float dglog, float* dx, float* dA) {
  *dx = 0.0f;
  *dA = 0.0f;
  if (dglog == 0.0f) return;
  switch (p.gate_mode) {
    case KDA_GATE_SOFTPLUS:  // g_log = -exp(A) softplus(x): d/dx = -exp(A) sigmoid(x), d/dA = g_log
      *dx = -dglog * (expf(a_log) * sigmoid(x));
      *dA = dglog * glog;
      break;
    case KDA_GATE_BOUNDED: {  // g_log = lb sigmoid(z), z = exp(A) x (or x)
      const float sc = has_a ? expf(a_log) : 1.0f;
      const float z = x == 0.0f ? 0.0f : sc * x;
      const float dz = dglog * p.lower_bound * sigmoid_grad(z);
      if (dz != 0.0f) {
        *dx = dz * sc;
        *dA = has_a ? dz * z : 0.0f;
      }
      break;
    }
    default:
      *dx = dglog;
  }
}

// dq / dk: per (token, q/k head, which), the group's value heads summed in order, then the L2 norm's backward
// d/dx [x / |x|] dxh = (dxh - xh (xh . dxh)) / |x|. One warp per row.
template <int K>
__global__ void __launch_bounds__(256) finalize_qk_kernel(const BackwardParams bp, const float* dqk, int64_t rows) {
  constexpr int C = K / 32;
  const ForwardParams& p = bp.f;
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32; row < rows; row += warps) {
    const int which = static_cast<int>(row % 2);
    const int64_t r2 = row / 2;
    const int h = static_cast<int>(r2 % p.H);
    const int64_t bt = r2 / p.H, b = bt / p.T, t = bt % p.T;
    float d[C] = {};
    for (int j = 0; j < p.group; ++j) {
      const float* src = dqk + ((static_cast<size_t>(which) * p.B * p.T + bt) * p.HV + h * p.group + j) * K;
#pragma unroll
      for (int c = 0; c < C; ++c) d[c] += src[c * 32 + lane];
    }
    const TensorView& x = which == 0 ? p.q : p.k;
    const GradView& g = which == 0 ? bp.dq : bp.dk;
    if (p.use_qk_l2norm) {
      float xv[C];
      const int64_t base = b * x.stride[0] + t * x.stride[1] + h * x.stride[2];
#pragma unroll
      for (int c = 0; c < C; ++c) xv[c] = load_f(x.data, x.dtype, base + (c * 32 + lane) * x.stride[3]);
      const float inv = warp_inv_norm<C>(xv);
      float dot = 0.0f;
#pragma unroll
      for (int c = 0; c < C; ++c) {
        xv[c] *= inv;
        dot = fmaf(xv[c], d[c], dot);
      }
      dot = group_sum<32>(dot);
#pragma unroll
      for (int c = 0; c < C; ++c) d[c] = (d[c] - xv[c] * dot) * inv;
    }
    const int64_t base = b * g.stride[0] + t * g.stride[1] + h * g.stride[2];
#pragma unroll
    for (int c = 0; c < C; ++c) store_out(g.data, g.dtype, base + (c * 32 + lane) * g.stride[3], d[c]);
  }
}

// ddt_bias [HV, K] and dA_log [HV]: `rows` partial sums per head ([rows][HV][K + 1]: per sequence, or per chunk)
// added in row order.
__global__ void gate_params_kernel(const BackwardParams bp, const double* part, int64_t rows) {
  const ForwardParams& p = bp.f;
  const int64_t entries = static_cast<int64_t>(p.HV) * (p.K + 1);
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < entries;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int hv = static_cast<int>(e / (p.K + 1)), d = static_cast<int>(e % (p.K + 1));
    double s = 0.0;
    for (int64_t n = 0; n < rows; ++n) s += part[(n * p.HV + hv) * (p.K + 1) + d];
    if (d < p.K) {
      if (bp.ddt_bias.data)
        static_cast<float*>(bp.ddt_bias.data)[hv * bp.ddt_bias.stride[0] + d * bp.ddt_bias.stride[1]] = static_cast<float>(s);
    } else if (bp.dA_log.data) {
      static_cast<float*>(bp.dA_log.data)[hv * bp.dA_log.stride[0]] = static_cast<float>(s);
    }
  }
}

}  // namespace
}  // namespace kda::cuda
