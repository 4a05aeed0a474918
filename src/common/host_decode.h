// host_decode.h: decode on the host: the token recurrence against a state pool, in compute type T (double for
// the reference, float for the CPU backend), threads over (sequence, value head). The float64 instance is
// itself checked against the forward reference (a decode is a forward from the pool's state).
#pragma once

#include <vector>

#include "common/host_token.h"
#include "common/threads.h"

namespace kda {

template <typename T>
void host_decode(const DecodeParams& p) {
  const ForwardParams& io = p.io;
  const int K = io.K, V = io.V, HV = io.HV;
  const int64_t tasks = io.N * HV;
  float* pool = static_cast<float*>(p.pool);
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
        for (int ki = 0; ki < K; ++ki) S[vi * K + ki] = pool[io.state_offset(p.pool_stride, slot, hv, vi, ki)];
      for (int64_t t = 0; t < io.T; ++t) {
        T beta;
        load_token<T>(io, n, t, hv, q.data(), k.data(), v.data(), g.data(), &beta);
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
        store_row<T>(io.out, io.out_dtype, n * io.out_stride[0] + t * io.out_stride[1] + hv * io.out_stride[2],
                     io.out_stride[3], V, o.data());
        const int64_t w = p.write_slot(n, t);
        if (w >= 0)
          for (int vi = 0; vi < V; ++vi)
            for (int ki = 0; ki < K; ++ki)
              pool[io.state_offset(p.pool_stride, w, hv, vi, ki)] = static_cast<float>(S[vi * K + ki]);
      }
    }
  }
}

}  // namespace kda
