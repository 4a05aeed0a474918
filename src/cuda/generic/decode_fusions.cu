// decode_fusions.cu: the decode call's optional fusions on CUDA (kda.h, kda_decode_args_t): the causal short
// convolution of q/k/v with its conv-state pool, run before the decode kernel, and the gated RMSNorm of the output,
// run after it, each as one small kernel on the same stream inside the same kda_decode call (so a CUDA graph of
// the call holds them), with the intermediates in the caller's workspace:
//   conv'd q, k [N, T, H, K] and v [N, T, HV, V] in fp32 (the decode kernel reads them instead of q, k, v), and
//   o [N, T, HV, V] in fp32 before the norm (the decode kernel writes it instead of out).
// The intermediates stay fp32 so the result is the CPU backend's (host_decode.h): one rounding, to out's dtype,
// after the norm. This three-kernel form serves what decode_head.cu's one kernel does not take (grouped heads, K-first
// pools, K = 256, T > 4, batches past one wave, forced paths): there the norm of a row needs all V outputs of a
// (token, value head), which the decode kernel spreads over several CTAs, and the conv-state write of a q/k channel
// would race with the other value heads' CTAs reading it in place.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common/math.h"
#include "common/params.h"
#include "cuda/decode_math.cuh"
#include "cuda/device_common.cuh"
#include "cuda/generic/decode_fusions.h"

namespace kda::cuda {
namespace {

constexpr int kConvThreads = 256;
constexpr int kNormThreads = 128;  // 4 warps, a (token, value head) row per warp

// One thread per (sequence, channel of q | k | v): the conv state (3 inputs) and the 4 taps in registers, the
// tokens in order. Every read of a channel's old state precedes its writes (possibly to the start slot), and
// sequences own disjoint slots, so the in-place update is race-free.
__global__ void __launch_bounds__(kConvThreads) conv_kernel(const DecodeParams p, float* xc) {
  const ForwardParams& io = p.io;
  constexpr int W = DecodeParams::kConvWidth;
  const int64_t dq = int64_t{io.H} * io.K, dv = int64_t{io.HV} * io.V, per_tok = 2 * dq + dv;
  for (int64_t idx = blockIdx.x * int64_t{kConvThreads} + threadIdx.x; idx < io.N * per_tok;
       idx += int64_t{gridDim.x} * kConvThreads) {
    const int64_t n = idx / per_tok, cc = idx % per_tok;
    const int i = cc < dq ? 0 : cc < 2 * dq ? 1 : 2;
    const int64_t c = cc - (i == 0 ? 0 : i == 1 ? dq : 2 * dq);
    const int width = i < 2 ? io.K : io.V;  // channel c = head * width + col
    const int64_t head = c / width, col = c % width;
    const TensorView& x = i == 0 ? io.q : i == 1 ? io.k : io.v;
    const TensorView& w = p.conv_w[i];
    const TensorView& cs = p.conv_state[i];
    float* const out = xc + n * io.T * per_tok + cc;
    const int64_t slot = p.read_slot(n);
    if (slot < 0) {  // padding: no conv state read or written; the decode kernel skips the sequence
      for (int64_t t = 0; t < io.T; ++t) out[t * per_tok] = 0.0f;
      continue;
    }
    float s[W - 1], wc[W];
#pragma unroll
    for (int j = 0; j < W - 1; ++j) s[j] = load_f(cs, slot * cs.stride[0] + c * cs.stride[1] + j * cs.stride[2]);
#pragma unroll
    for (int j = 0; j < W; ++j) wc[j] = load_f(w, c * w.stride[0] + j * w.stride[1]);
    for (int64_t t = 0; t < io.T; ++t) {
      out[t * per_tok] =
          conv_token(wc, s, load_f(x, n * x.stride[0] + t * x.stride[1] + head * x.stride[2] + col * x.stride[3]));
      const int64_t ws = p.write_slot(n, t);
      if (ws >= 0) store_conv_state(cs, ws, c, s);
    }
  }
}

// One warp per (sequence n, token t, value head hv): the row's sum of squares by shuffles, then
// out = o rsqrt(mean(o^2) + eps) weight act(gate), rounded once. Padding sequences get zeros (as the CPU backend).
__global__ void __launch_bounds__(kNormThreads) norm_kernel(const DecodeParams p, const float* o) {
  const ForwardParams& io = p.io;
  const int lane = threadIdx.x & 31;
  const int64_t rows = io.N * io.T * io.HV;
  for (int64_t r = (blockIdx.x * int64_t{kNormThreads} + threadIdx.x) / 32; r < rows;
       r += int64_t{gridDim.x} * (kNormThreads / 32)) {
    const int64_t n = r / (io.T * io.HV), t = (r / io.HV) % io.T;
    const int hv = static_cast<int>(r % io.HV);
    const int64_t ob = n * io.out_stride[0] + t * io.out_stride[1] + hv * io.out_stride[2];
    if (p.read_slot(n) < 0) {
      for (int vi = lane; vi < io.V; vi += 32) store_out(io.out, io.out_dtype, ob + vi * io.out_stride[3], 0.0f);
      continue;
    }
    const float* row = o + r * io.V;
    float ss = 0.0f;
    for (int vi = lane; vi < io.V; vi += 32) ss = fmaf(row[vi], row[vi], ss);
    ss = group_sum<32>(ss);
    const float rs = 1.0f / sqrtf(ss / static_cast<float>(io.V) + p.norm_eps);
    for (int vi = lane; vi < io.V; vi += 32) {
      const float wt = load_f(p.norm_weight, vi * p.norm_weight.stride[0]);
      const float g = load_f(p.out_gate, n * p.out_gate.stride[0] + t * p.out_gate.stride[1] +
                                             hv * p.out_gate.stride[2] + vi * p.out_gate.stride[3]);
      const float sg = 1.0f / (1.0f + expf(-g));
      const float act = p.norm_act == KDA_OUT_GATE_SIGMOID ? sg : g * sg;
      store_out(io.out, io.out_dtype, ob + vi * io.out_stride[3], row[vi] * rs * wt * act);
    }
  }
}

unsigned grid_for(int64_t items, int per_block, int sms) {
  return static_cast<unsigned>(
      std::max<int64_t>(1, std::min<int64_t>((items + per_block - 1) / per_block, 32 * int64_t{sms})));
}

}  // namespace

FusionLayout::FusionLayout(const DecodeParams& p) {
  const ForwardParams& io = p.io;
  auto align256 = [](int64_t b) { return (b + 255) / 256 * 256; };
  if (p.conv) conv_bytes = align256(4 * io.N * io.T * (2 * int64_t{io.H} * io.K + int64_t{io.HV} * io.V));
  if (p.out_norm) norm_bytes = align256(4 * io.N * io.T * int64_t{io.HV} * io.V);
}

DecodeParams fusion_inner_params(const DecodeParams& p, void* workspace) {
  const ForwardParams& io = p.io;
  DecodeParams inner = p;
  inner.conv = inner.out_norm = false;
  if (p.conv) {
    float* const xc = static_cast<float*>(workspace);
    const int64_t dq = int64_t{io.H} * io.K, per_tok = 2 * dq + int64_t{io.HV} * io.V;
    const int64_t at[3] = {0, dq, 2 * dq}, width[3] = {io.K, io.K, io.V};
    TensorView* const views[3] = {&inner.io.q, &inner.io.k, &inner.io.v};
    for (int i = 0; i < 3; ++i) {
      TensorView& x = *views[i];
      x.data = xc + at[i];
      x.dtype = KDA_DTYPE_FLOAT32;
      x.stride[0] = io.T * per_tok;
      x.stride[1] = per_tok;
      x.stride[2] = width[i];
      x.stride[3] = 1;
    }
  }
  if (p.out_norm) {
    inner.io.out = static_cast<char*>(workspace) + FusionLayout(p).conv_bytes;
    inner.io.out_dtype = KDA_DTYPE_FLOAT32;
    inner.io.out_stride[0] = io.T * int64_t{io.HV} * io.V;
    inner.io.out_stride[1] = int64_t{io.HV} * io.V;
    inner.io.out_stride[2] = io.V;
    inner.io.out_stride[3] = 1;
  }
  return inner;
}

void launch_decode_conv(const DecodeParams& p, void* workspace, int sms, cudaStream_t s) {
  const int64_t per_tok = 2 * int64_t{p.io.H} * p.io.K + int64_t{p.io.HV} * p.io.V;
  conv_kernel<<<grid_for(p.io.N * per_tok, kConvThreads, sms), kConvThreads, 0, s>>>(p, static_cast<float*>(workspace));
}

void launch_decode_norm(const DecodeParams& p, const void* workspace, int sms, cudaStream_t s) {
  const float* o = reinterpret_cast<const float*>(static_cast<const char*>(workspace) + FusionLayout(p).conv_bytes);
  norm_kernel<<<grid_for(p.io.N * p.io.T * p.io.HV, kNormThreads / 32, sms), kNormThreads, 0, s>>>(p, o);
}

}  // namespace kda::cuda
