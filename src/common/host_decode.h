// host_decode.h: decode on the host: the token recurrence against a state pool, in compute type T (double for
// the reference, float for the CPU backend), threads over (sequence, value head), with the optional fusions
// (causal short conv of q/k/v with its conv state, gated RMSNorm of the output). The float64 instance is itself
// checked against the forward reference (a decode is a forward from the pool's state) and, with the fusions,
// against a hand-written fp64 computation in tests/cpu/test_decode.cpp.
#pragma once

#include <vector>

#include "common/host_token.h"
#include "common/threads.h"

namespace kda {

// The fused conv, first pass: conv + SiLU of q, k, v for every token into xc ([N][T][H*K | H*K | HV*V] in T),
// and the conv states after each token written to that token's write slot. One thread per sequence: a
// sequence's q/k conv channels are shared by the value heads of a group, and sequences own disjoint slots.
template <typename T>
void host_decode_conv(const DecodeParams& p, std::vector<T>& xc) {
  const ForwardParams& io = p.io;
  constexpr int W = DecodeParams::kConvWidth;
  const int64_t dims[3] = {int64_t{io.H} * io.K, int64_t{io.H} * io.K, int64_t{io.HV} * io.V};
  const int64_t per_tok = dims[0] + dims[1] + dims[2];
  xc.assign(static_cast<size_t>(io.N * io.T * per_tok), T(0));
#pragma omp parallel for schedule(dynamic, 1) num_threads(worker_threads(io.cpu_threads))
  for (int64_t n = 0; n < io.N; ++n) {
    const int64_t slot = p.read_slot(n);
    if (slot < 0) continue;  // padding: no conv state read or written
    std::vector<T> seq(static_cast<size_t>(W - 1 + io.T));
    int64_t base = 0;
    for (int i = 0; i < 3; ++i) {
      const TensorView& x = i == 0 ? io.q : i == 1 ? io.k : io.v;
      const TensorView& w = p.conv_w[i];
      const TensorView& cs = p.conv_state[i];
      const int width = i < 2 ? io.K : io.V;  // channel c = head * width + col
      for (int64_t c = 0; c < dims[i]; ++c) {
        const int64_t head = c / width, col = c % width;
        for (int j = 0; j < W - 1; ++j)
          seq[j] = static_cast<T>(load_element(cs.data, cs.dtype, slot * cs.stride[0] + c * cs.stride[1] + j * cs.stride[2]));
        for (int64_t t = 0; t < io.T; ++t)
          seq[W - 1 + t] = static_cast<T>(load_element(
              x.data, x.dtype, n * x.stride[0] + t * x.stride[1] + head * x.stride[2] + col * x.stride[3]));
        T wc[W];
        for (int j = 0; j < W; ++j) wc[j] = static_cast<T>(load_element(w.data, w.dtype, c * w.stride[0] + j * w.stride[1]));
        for (int64_t t = 0; t < io.T; ++t) {
          T acc = 0;
          for (int j = 0; j < W; ++j) acc += wc[j] * seq[t + j];
          xc[(n * io.T + t) * per_tok + base + c] = acc * sigmoid<T>(acc);  // SiLU
        }
        // All of this channel's old state is in seq, so writes (possibly to the start slot) cannot feed a read.
        for (int64_t t = 0; t < io.T; ++t) {
          const int64_t ws = p.write_slot(n, t);
          if (ws < 0) continue;
          for (int j = 0; j < W - 1; ++j)
            store_element(const_cast<void*>(cs.data), cs.dtype, ws * cs.stride[0] + c * cs.stride[1] + j * cs.stride[2],
                          static_cast<double>(seq[t + 1 + j]));
        }
      }
      base += dims[i];
    }
  }
}

// The fused gated RMSNorm of one (token, value head) output row o[V], in place.
template <typename T>
void host_out_norm(const DecodeParams& p, int64_t n, int64_t t, int hv, T* o) {
  const ForwardParams& io = p.io;
  T ss = 0;
  for (int vi = 0; vi < io.V; ++vi) ss += o[vi] * o[vi];
  const T r = T(1) / std::sqrt(ss / T(io.V) + T(p.norm_eps));
  for (int vi = 0; vi < io.V; ++vi) {
    const T w = static_cast<T>(load_element(p.norm_weight.data, p.norm_weight.dtype, vi * p.norm_weight.stride[0]));
    const T g = static_cast<T>(load_element(p.out_gate.data, p.out_gate.dtype,
                                            n * p.out_gate.stride[0] + t * p.out_gate.stride[1] +
                                                hv * p.out_gate.stride[2] + vi * p.out_gate.stride[3]));
    const T act = p.norm_act == KDA_OUT_GATE_SIGMOID ? sigmoid<T>(g) : g * sigmoid<T>(g);
    o[vi] = o[vi] * r * w * act;
  }
}

template <typename T>
void host_decode(const DecodeParams& p) {
  const ForwardParams& io = p.io;
  const int K = io.K, V = io.V, HV = io.HV;
  const int64_t tasks = io.N * HV;
  float* pool = static_cast<float*>(p.pool);  // fp32 pools; a bf16 one goes through load_element / store_element
  const bool bf16_pool = p.pool_dtype == KDA_DTYPE_BFLOAT16;
  std::vector<T> xc;  // conv outputs, [N][T][q H*K | k H*K | v HV*V]
  if (p.conv) host_decode_conv<T>(p, xc);
  const int64_t qk_dim = int64_t{io.H} * K, per_tok = 2 * qk_dim + int64_t{HV} * V;
#pragma omp parallel num_threads(worker_threads(io.cpu_threads))
  {
    std::vector<T> S(static_cast<size_t>(V) * K), q(K), k(K), v(V), g(K), alpha(K), o(V);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t n = task / HV;
      const int hv = static_cast<int>(task % HV);
      const int64_t slot = p.read_slot(n);
      if (slot < 0) {  // padding: zeros out, no slot touched
        for (int vi = 0; vi < V; ++vi) o[vi] = T(0);
        for (int64_t t = 0; t < io.T; ++t)
          store_row<T>(io.out, io.out_dtype, n * io.out_stride[0] + t * io.out_stride[1] + hv * io.out_stride[2],
                       io.out_stride[3], V, o.data());
        continue;
      }
      for (int vi = 0; vi < V; ++vi)
        for (int ki = 0; ki < K; ++ki)
          S[vi * K + ki] = bf16_pool ? static_cast<T>(load_element(p.pool, p.pool_dtype,
                                                                   io.state_offset(p.pool_stride, slot, hv, vi, ki)))
                                     : pool[io.state_offset(p.pool_stride, slot, hv, vi, ki)];
      for (int64_t t = 0; t < io.T; ++t) {
        T beta;
        if (p.conv) {  // conv'd q/k/v, then the token's own preprocessing (q/k L2 norm) as without the conv
          const T* x = &xc[static_cast<size_t>((n * io.T + t) * per_tok)];
          const int h = hv / io.group;
          for (int ki = 0; ki < K; ++ki) {
            q[ki] = x[h * K + ki];
            k[ki] = x[qk_dim + h * K + ki];
          }
          for (int vi = 0; vi < V; ++vi) v[vi] = x[2 * qk_dim + int64_t{hv} * V + vi];
          if (io.use_qk_l2norm) {
            l2_normalize(q.data(), K);
            l2_normalize(k.data(), K);
          }
          load_token<T>(io, n, t, hv, nullptr, nullptr, nullptr, g.data(), &beta);
        } else {
          load_token<T>(io, n, t, hv, q.data(), k.data(), v.data(), g.data(), &beta);
        }
        for (int ki = 0; ki < K; ++ki) alpha[ki] = std::exp(g[ki]);
        for (int vi = 0; vi < V; ++vi) {
          T* row = &S[static_cast<size_t>(vi) * K];
          T sk = 0;
          for (int ki = 0; ki < K; ++ki) {
            row[ki] *= alpha[ki];
            sk += row[ki] * k[ki];
          }
          const T u = beta * (v[vi] - sk);
          T acc = 0;
          for (int ki = 0; ki < K; ++ki) {
            row[ki] += u * k[ki];
            acc += row[ki] * q[ki];
          }
          o[vi] = T(io.scale) * acc;
        }
        if (p.out_norm) host_out_norm<T>(p, n, t, hv, o.data());
        store_row<T>(io.out, io.out_dtype, n * io.out_stride[0] + t * io.out_stride[1] + hv * io.out_stride[2],
                     io.out_stride[3], V, o.data());
        const int64_t w = p.write_slot(n, t);
        if (w >= 0)
          for (int vi = 0; vi < V; ++vi)
            for (int ki = 0; ki < K; ++ki) {
              const int64_t off = io.state_offset(p.pool_stride, w, hv, vi, ki);
              if (bf16_pool)  // one rounding from the compute type (fp32 for the CPU backend: as the GPU kernels)
                store_element(p.pool, p.pool_dtype, off, static_cast<double>(static_cast<float>(S[vi * K + ki])));
              else
                pool[off] = static_cast<float>(S[vi * K + ki]);
            }
      }
    }
  }
}

}  // namespace kda
