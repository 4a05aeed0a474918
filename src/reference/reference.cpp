// reference.cpp: the float64 token-by-token recurrence (operator.md, "The recurrence"), value-first state.
#include "reference/reference.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/host_token.h"
#include "common/threads.h"

namespace kda::reference {

Status forward(const ForwardParams& p, double* out_mag, const KeyScaleTangent* tangent) {
  const std::vector<SequenceSpan> seqs = host_sequences(p);
  const int K = p.K, V = p.V, HV = p.HV;
  const int64_t tasks = p.N * HV;
  const double scale = p.scale;

#pragma omp parallel num_threads(worker_threads(p.cpu_threads))
  {
    std::vector<double> S(static_cast<size_t>(V) * K), q(K), k(K), v(V), g(K), alpha(K);
    // The tangent Y = dS / d eps of the state under k_hat -> (1 + eps) k_hat at every token (reference.h).
    std::vector<double> Y(tangent ? static_cast<size_t>(V) * K : 0);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t n = task / HV;
      const int hv = static_cast<int>(task % HV);
      const SequenceSpan& sp = seqs[n];
      // S is value-first (S[v * K + k]) whatever the caller's layout.
      for (int vi = 0; vi < V; ++vi)
        for (int ki = 0; ki < K; ++ki)
          S[vi * K + ki] = p.has_initial_state()
                               ? load_element(p.initial_state.data, p.initial_state.dtype,
                                              p.state_offset(p.initial_state.stride, n, hv, vi, ki))
                               : 0.0;
      std::fill(Y.begin(), Y.end(), 0.0);  // h0 is an input: no tangent
      // Prefix-cache checkpoints, written when the token count reaches theirs.
      HostCheckpoints ckpts(p, n, hv, sp.length);
      auto state = [&](int vi, int ki) { return S[vi * K + ki]; };
      ckpts.write(0, state);
      for (int64_t i = 0; i < sp.length; ++i) {
        const int64_t t = sp.start + i;
        double beta;
        load_token<double>(p, sp.batch, t, hv, q.data(), k.data(), v.data(), g.data(), &beta);
        for (int ki = 0; ki < K; ++ki) alpha[ki] = std::exp(g[ki]);
        const int64_t out_base = sp.batch * p.out_stride[0] + t * p.out_stride[1] + hv * p.out_stride[2];
        for (int vi = 0; vi < V; ++vi) {
          double* row = &S[static_cast<size_t>(vi) * K];
          double sk = 0;
#pragma omp simd reduction(+ : sk)
          for (int ki = 0; ki < K; ++ki) {
            row[ki] *= alpha[ki];
            sk += row[ki] * k[ki];
          }
          const double u = beta * (v[vi] - sk);
          if (tangent) {
            // Y_t = Y_{t-1} D (I - beta k k^T) + (beta v - 2 beta S_{t-1} D k) k^T, row by row as S; dO = scale Y_t q.
            double* yrow = &Y[static_cast<size_t>(vi) * K];
            double yk = 0;
            for (int ki = 0; ki < K; ++ki) {
              yrow[ki] *= alpha[ki];
              yk += yrow[ki] * k[ki];
            }
            const double w = beta * (v[vi] - yk - 2 * sk);
            double dout = 0;
            for (int ki = 0; ki < K; ++ki) {
              yrow[ki] += w * k[ki];
              dout += yrow[ki] * q[ki];
            }
            tangent->out[((sp.batch * p.T + t) * HV + hv) * V + vi] = scale * dout;
          }
          double o = 0, mag = 0;
#pragma omp simd reduction(+ : o, mag)
          for (int ki = 0; ki < K; ++ki) {
            row[ki] += u * k[ki];
            const double term = row[ki] * q[ki];
            o += term;
            mag += std::fabs(term);
          }
          store_element(p.out, p.out_dtype, out_base + vi * p.out_stride[3], scale * o);
          if (out_mag) out_mag[((sp.batch * p.T + t) * HV + hv) * V + vi] = std::fabs(scale) * mag;
        }
        ckpts.write(i + 1, state);
      }
      if (p.has_final_state())
        for (int vi = 0; vi < V; ++vi)
          for (int ki = 0; ki < K; ++ki)
            store_element(p.final_state, p.final_state_dtype, p.state_offset(p.final_state_stride, n, hv, vi, ki),
                          S[vi * K + ki]);
      if (p.has_final_state() && tangent)
        for (int vi = 0; vi < V; ++vi)
          for (int ki = 0; ki < K; ++ki)
            tangent->final_state[p.state_offset(p.final_state_stride, n, hv, vi, ki)] = Y[vi * K + ki];
    }
  }
  return Status::Ok();
}

}  // namespace kda::reference
