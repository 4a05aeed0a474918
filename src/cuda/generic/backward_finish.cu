// backward_finish.cu: the two finishing kernels of both CUDA backwards (backward_finish.h): dq / dk summed over a
// value-head group through the L2 norm's backward (one warp per row), and ddt_bias / dA_log summed from per-row
// partials in a fixed order (deterministic: no atomics).
#include <algorithm>
#include <cstdint>

#include "common/backward_params.h"
#include "cuda/device_common.cuh"
#include "cuda/generic/backward_common.cuh"
#include "cuda/generic/backward_finish.h"

namespace kda::cuda {
namespace {

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
#pragma unroll
      for (int c = 0; c < C; ++c) xv[c] *= inv;
      l2_norm_backward(xv, inv, d);
    }
    const int64_t base = b * g.stride[0] + t * g.stride[1] + h * g.stride[2];
#pragma unroll
    for (int c = 0; c < C; ++c) store_out(g.data, g.dtype, base + (c * 32 + lane) * g.stride[3], d[c]);
  }
}

// ddt_bias / dA_log: one thread per (head, channel or A_log) entry.
__global__ void gate_params_kernel(const BackwardParams bp, const double* part, int64_t rows) {
  const ForwardParams& p = bp.f;
  const int64_t entries = static_cast<int64_t>(p.HV) * (p.K + 1);
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < entries;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int hv = static_cast<int>(e / (p.K + 1)), d = static_cast<int>(e % (p.K + 1));
    double s = 0.0;
    for (int64_t n = 0; n < rows; ++n) s += part[(n * p.HV + hv) * (p.K + 1) + d];
    if (d < p.K) {
      if (bp.ddt_bias.data) {
        float* const out = static_cast<float*>(bp.ddt_bias.data);
        out[hv * bp.ddt_bias.stride[0] + d * bp.ddt_bias.stride[1]] = static_cast<float>(s);
      }
    } else if (bp.dA_log.data) {
      static_cast<float*>(bp.dA_log.data)[hv * bp.dA_log.stride[0]] = static_cast<float>(s);
    }
  }
}

}  // namespace

void launch_finalize_qk(const BackwardParams& bp, const float* dqk, cudaStream_t s) {
  const ForwardParams& p = bp.f;
  const int64_t rows = 2 * p.B * p.T * p.H;
  if (rows <= 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((rows + 7) / 8, 65535));  // 8 rows per CTA
  if (p.K == 64)
    finalize_qk_kernel<64><<<blocks, 256, 0, s>>>(bp, dqk, rows);
  else
    finalize_qk_kernel<128><<<blocks, 256, 0, s>>>(bp, dqk, rows);
}

void launch_gate_params(const BackwardParams& bp, const double* part, int64_t rows, cudaStream_t s) {
  const ForwardParams& p = bp.f;
  if (p.gate_mode == KDA_GATE_LOG_DECAY) return;
  const int64_t entries = static_cast<int64_t>(p.HV) * (p.K + 1);
  gate_params_kernel<<<static_cast<unsigned>((entries + 255) / 256), 256, 0, s>>>(bp, part, rows);
}

}  // namespace kda::cuda
