// backward.cpp: the float64 reverse of the token recurrence (backward.h). Per token, with S' = S_{t-1} diag(a_t),
// p = S' k_t, u = beta_t (v_t - p), S_t = S' + u k_t^T, o_t = scale S_t q_t, and G the gradient of S_t:
//   G += scale dO_t q_t^T;  dq_t = scale S_t^T dO_t;  du = G k_t;  dk_t = G^T u;  dbeta_t = du . (v_t - p);
//   dv_t = beta_t du;  dp = -beta_t du;  dS' = G + dp k_t^T;  dk_t += S'^T dp;  da_t = colsum(S_{t-1} . dS');
//   G <- dS' diag(a_t);  dg_log = da_t . a_t;
// then through the L2 norms, the gate activation and the beta sigmoid. States are recomputed from checkpoints
// every kSegment tokens, so memory stays at (T / kSegment + kSegment) states per task.
#include "reference/backward.h"

#include <cmath>
#include <type_traits>
#include <vector>

#include "common/host_token.h"
#include "cpu/backward_cpu.h"
#include "cpu/forward_cpu.h"
#include "common/threads.h"

namespace kda::reference {
namespace {

constexpr int kSegment = 64;

// Raw gate input and the pieces of its activation a token needs for the chain rule.
template <typename T>
struct GateGrad {
  T dx;  // d/d(g + dt_bias)
  T dA;  // d/dA_log
};

// exp_a: exp(A_log), formed once a value head (1 without A_log).
template <typename T>
GateGrad<T> gate_grad(const ForwardParams& p, T x, T exp_a, bool has_a, T g_log, T dg_log) {
  switch (p.gate_mode) {
    case KDA_GATE_SOFTPLUS:  // g_log = -exp(A) softplus(x): d/dx = -exp(A) sigmoid(x), d/dA = g_log
      return {dg_log * -exp_a * sigmoid(x), dg_log * g_log};
    case KDA_GATE_BOUNDED: {  // g_log = lb sigmoid(z), z = exp(A) x (or x)
      const T scale = has_a ? exp_a : T(1);
      const T z = scale * x;
      const T dz = dg_log * T(p.lower_bound) * sigmoid_grad(z);
      return {dz * scale, has_a ? dz * z : T(0)};
    }
    default:
      return {dg_log, T(0)};
  }
}

// A worker thread's per-task arrays, kept across its tasks: fresh vectors of a long sequence's size each task cost
// more in page faults and zeroing than the chunked core's products (train-cpu-8k-h8, ~1 GB of new pages a backward).
// fit() sizes an array whose every element the task writes before reading; zeroed() one it accumulates into.
template <typename T>
struct TaskArrays {
  std::vector<T> q, k, qh, kh, v, x, glog, beta, braw, rq, rk, alpha, S, G, dQh, dKh, dV, dGl, dB, mDb, mDg, dO,
      ckpt, prev;
  static std::vector<T>& fit(std::vector<T>& a, size_t n) {
    a.resize(n);
    return a;
  }
  static std::vector<T>& zeroed(std::vector<T>& a, size_t n, T value = T(0)) {
    a.assign(n, value);
    return a;
  }
};

// d/dx of x / sqrt(|x|^2 + eps) applied to dxh: (dxh - xh (xh . dxh)) / r.
template <typename T>
void norm_backward(const T* xh, T r, const T* dxh, int n, T* dx_acc) {
  T dot = 0;
  for (int i = 0; i < n; ++i) dot += xh[i] * dxh[i];
  for (int i = 0; i < n; ++i) dx_acc[i] += (dxh[i] - xh[i] * dot) / r;
}

}  // namespace

template <typename T>
Status backward(const ForwardParams& p, const T* dout, const T* dfinal, GradientsT<T>* g, bool chunked,
                double key_scale) {
  const std::vector<SequenceSpan> seqs = host_sequences(p);
  const int K = p.K, V = p.V, H = p.H, HV = p.HV;
  const int64_t BT = p.B * p.T;
  g->dq.assign(static_cast<size_t>(BT) * H * K, T(0));
  g->dk.assign(g->dq.size(), T(0));
  g->dv.assign(static_cast<size_t>(BT) * HV * V, T(0));
  g->dg.assign(static_cast<size_t>(BT) * HV * K, T(0));
  g->dbeta.assign(static_cast<size_t>(BT) * HV, T(0));
  const bool gated = p.gate_mode != KDA_GATE_LOG_DECAY;
  g->dA_log.assign(p.has_A_log() ? HV : 0, T(0));
  g->ddt_bias.assign(gated ? static_cast<size_t>(HV) * K : 0, T(0));
  g->dh0.assign(p.has_initial_state() ? static_cast<size_t>(p.N) * HV * V * K : 0, T(0));
  const bool mags = !chunked;  // the oracle's cancellation sizes (backward.h); a backend's backward has none
  g->mag_dbeta.assign(mags ? g->dbeta.size() : 0, T(0));
  g->mag_dg.assign(mags ? g->dg.size() : 0, T(0));
  g->mag_ddt_bias.assign(mags ? g->ddt_bias.size() : 0, T(0));
  g->mag_dA_log.assign(mags ? g->dA_log.size() : 0, T(0));
  const size_t SK = static_cast<size_t>(V) * K;
  const bool has_a = p.has_A_log();
  auto state_index = [&](int64_t n, int hv, int vi, int ki) {
    return p.state_v_first ? ((n * HV + hv) * V + vi) * K + ki : ((n * HV + hv) * K + ki) * V + vi;
  };

  // One task per q/k head: it owns dq/dk of that head and dv/dg/dbeta/dA_log/ddt_bias of its value heads, so no
  // two tasks write the same element and the sums run in a fixed order (deterministic).
#pragma omp parallel num_threads(worker_threads(p.cpu_threads))
  {
  TaskArrays<T> ta;
  using TA = TaskArrays<T>;
#pragma omp for schedule(dynamic, 1)
  for (int h = 0; h < H; ++h) {
    for (int hv = h * p.group; hv < (h + 1) * p.group; ++hv) {
      const T a_log = has_a ? (T)load_element(p.A_log.data, p.A_log.dtype, hv * p.A_log.stride[0]) : T(0);
      const T exp_a = has_a ? std::exp(a_log) : T(1);
      for (int64_t n = 0; n < p.N; ++n) {
        const SequenceSpan& sp = seqs[n];
        const int64_t L = sp.length;
        const size_t LK = static_cast<size_t>(L) * K, LV = static_cast<size_t>(L) * V, L1 = static_cast<size_t>(L);
        // Per-token inputs, raw and preprocessed.
        std::vector<T> &q = TA::fit(ta.q, LK), &k = TA::fit(ta.k, LK), &qh = TA::fit(ta.qh, LK),
                       &kh = TA::fit(ta.kh, LK), &v = TA::fit(ta.v, LV), &x = TA::fit(ta.x, LK),
                       &glog = TA::fit(ta.glog, LK), &beta = TA::fit(ta.beta, L1), &braw = TA::fit(ta.braw, L1),
                       &rq = TA::zeroed(ta.rq, L1, T(1)), &rk = TA::zeroed(ta.rk, L1, T(1));
        ForwardParams raw = p;  // the inputs as given: no norm, no activation
        raw.use_qk_l2norm = false;
        raw.gate_mode = KDA_GATE_LOG_DECAY;
        raw.beta_is_logits = false;
        raw.allow_neg_eigval = false;
        for (int64_t i = 0; i < L; ++i) {
          const int64_t t = sp.start + i;
          load_token<T>(raw, sp.batch, t, hv, &q[i * K], &k[i * K], &v[i * V], &x[i * K], &braw[i]);
          load_token<T>(p, sp.batch, t, hv, &qh[i * K], &kh[i * K], nullptr, &glog[i * K], &beta[i]);
          if (key_scale != 1.0)
            for (int d = 0; d < K; ++d) kh[i * K + d] *= static_cast<T>(key_scale);
          if (p.use_qk_l2norm) {
            T sq = 0, sk = 0;
            for (int d = 0; d < K; ++d) {
              sq += q[i * K + d] * q[i * K + d];
              sk += k[i * K + d] * k[i * K + d];
            }
            rq[i] = std::sqrt(sq + kL2NormEps);
            rk[i] = std::sqrt(sk + kL2NormEps);
          }
          if (gated)
            for (int d = 0; d < K; ++d)
              x[i * K + d] += load_element(p.dt_bias.data, p.dt_bias.dtype, hv * p.dt_bias.stride[0] + d * p.dt_bias.stride[1]);
        }
        // Each token's decays exp(g_log), once, for the token reverse (the chunked core forms its own): it uses each
        // ~4 V times per token, and calling exp there was most of the oracle's time (train-cpu-8k-h8: 15.0 s -> 4.1 s
        // on 2 cores).
        std::vector<T>& alpha = TA::fit(ta.alpha, chunked ? 0 : LK);
        if (!chunked)
          for (int64_t e = 0; e < L * K; ++e) alpha[e] = std::exp(glog[e]);
        // The initial state and the final state's gradient.
        std::vector<T> &S = TA::zeroed(ta.S, SK), &G = TA::zeroed(ta.G, SK);
        if (p.has_initial_state())
          for (int vi = 0; vi < V; ++vi)
            for (int ki = 0; ki < K; ++ki)
              S[vi * K + ki] = load_element(p.initial_state.data, p.initial_state.dtype,
                                            p.state_offset(p.initial_state.stride, n, hv, vi, ki));
        if (dfinal)
          for (int vi = 0; vi < V; ++vi)
            for (int ki = 0; ki < K; ++ki) G[vi * K + ki] = dfinal[state_index(n, hv, vi, ki)];
        // Gradients of the preprocessed inputs, per token: dqh, dkh (of the normalized q, k), dv, dglog (of the
        // log-decay), dbeta (of the activated beta), and the token core's mag sums; then the chain rules below. The
        // chunked core writes every element of the first five; the token reverse accumulates into them.
        auto grads = [&](std::vector<T>& a, size_t n) -> std::vector<T>& {
          return chunked ? TA::fit(a, n) : TA::zeroed(a, n);
        };
        std::vector<T> &dQh = grads(ta.dQh, LK), &dKh = grads(ta.dKh, LK), &dV = grads(ta.dV, LV),
                       &dGl = grads(ta.dGl, LK), &dB = grads(ta.dB, L1), &mDb = TA::zeroed(ta.mDb, mags ? L1 : 0),
                       &mDg = TA::zeroed(ta.mDg, mags ? LK : 0);
        if constexpr (std::is_same_v<T, double>) {
          if (chunked) {
            std::vector<T>& dO = TA::fit(ta.dO, LV);
            for (int64_t i = 0; i < L; ++i)
              for (int vi = 0; vi < V; ++vi)
                dO[i * V + vi] = dout[((sp.batch * p.T + sp.start + i) * HV + hv) * V + vi];
            cpu::chunked_sequence_backward(L, K, V, p.scale, qh.data(), kh.data(), v.data(), glog.data(),
                                           beta.data(), dO.data(), S.data(), G.data(), dQh.data(), dKh.data(),
                                           dV.data(), dGl.data(), dB.data(),
                                           p.chunk_size > 0 ? p.chunk_size : cpu::kDefaultChunk);
          }
        }
        if (!chunked) {
        // Forward, keeping the state at the start of every segment.
        const int64_t segments = (L + kSegment - 1) / kSegment;
        std::vector<T>& ckpt = TA::fit(ta.ckpt, static_cast<size_t>(segments + 1) * SK);
        auto step = [&](int64_t i, std::vector<T>& St, std::vector<T>* p_out) {
          // S <- S diag(a) + beta (v - S diag(a) k) k^T; returns p = S' k in p_out if given.
          for (int vi = 0; vi < V; ++vi) {
            T* row = &St[vi * K];
            T pk = 0;
#pragma omp simd reduction(+ : pk)
            for (int d = 0; d < K; ++d) {
              row[d] *= alpha[i * K + d];
              pk += row[d] * kh[i * K + d];
            }
            if (p_out) (*p_out)[vi] = pk;
            const T u = beta[i] * (v[i * V + vi] - pk);
            for (int d = 0; d < K; ++d) row[d] += u * kh[i * K + d];
          }
        };
        for (int64_t sgm = 0; sgm < segments; ++sgm) {
          std::copy(S.begin(), S.end(), ckpt.begin() + sgm * SK);
          for (int64_t i = sgm * kSegment; i < std::min(L, (sgm + 1) * kSegment); ++i) step(i, S, nullptr);
        }
        // Reverse, one segment at a time from the last.
        std::vector<T>& prev = TA::fit(ta.prev, static_cast<size_t>(kSegment) * SK);
        std::vector<T> St(SK), Srow(K);  // the segment's running state; one row of S' (the reverse below)
        for (int64_t sgm = segments - 1; sgm >= 0; --sgm) {
          const int64_t i0 = sgm * kSegment, i1 = std::min(L, i0 + kSegment);
          std::copy(ckpt.begin() + sgm * SK, ckpt.begin() + (sgm + 1) * SK, St.begin());
          for (int64_t i = i0; i < i1; ++i) {
            std::copy(St.begin(), St.end(), prev.begin() + (i - i0) * SK);
            step(i, St, nullptr);
          }
          for (int64_t i = i1 - 1; i >= i0; --i) {
            const int64_t t = sp.start + i;
            const T* Sprev = &prev[(i - i0) * SK];
            T* const dqh = &dQh[i * K];
            T* const dkh = &dKh[i * K];
            T* const dgl = &dGl[i * K];
            T* const mdg = &mDg[i * K];
            const T* const a = &alpha[i * K];
            const T* const kt = &kh[i * K];
            const T* const qt = &qh[i * K];
            const int64_t orow = ((sp.batch * p.T + t) * HV + hv) * V;
            // One pass over the state's rows: every quantity of row vi (S' = S_{t-1} diag(a), p = S' k, u, S_t, the
            // rows of G and dS') depends on that row only, so the token's state is read and G written once instead
            // of six passes through whole-state temporaries; with the row loops `omp simd`, -26% on train-cpu-8k-h8
            // (bench/LEDGER.md). The sums over the rows (dq, dk, da and their mags) take their terms row by row, in
            // increasing vi.
            T dbeta = 0, mag_db = 0;
            for (int vi = 0; vi < V; ++vi) {
              const T* const sprev = Sprev + vi * K;
              T* const gr = &G[vi * K];
              T* const spr = Srow.data();
              // S' row and p = S' k (with its mag).
              T pk = 0, pa = 0;
#pragma omp simd reduction(+ : pk, pa)
              for (int d = 0; d < K; ++d) {
                spr[d] = sprev[d] * a[d];
                pk += spr[d] * kt[d];
                pa += std::fabs(spr[d] * kt[d]);
              }
              const T r = v[i * V + vi] - pk;
              const T u = beta[i] * r;
              const T dOv = dout[orow + vi];
              // G += scale dO q^T; dq += scale S_t^T dO, S_t = S' + u k^T.
#pragma omp simd
              for (int d = 0; d < K; ++d) {
                gr[d] += p.scale * dOv * qt[d];
                dqh[d] += p.scale * (spr[d] + u * kt[d]) * dOv;
              }
              // du = G k; dk += G^T u; dbeta; dv; dp.
              T s = 0, sa = 0;
#pragma omp simd reduction(+ : s, sa)
              for (int d = 0; d < K; ++d) {
                s += gr[d] * kt[d];
                sa += std::fabs(gr[d] * kt[d]);
              }
              mag_db += sa * (std::fabs(v[i * V + vi]) + pa);
              dbeta += s * r;
              dV[i * V + vi] = beta[i] * s;
              const T dp = -beta[i] * s;
              // dS' = G + dp k^T; dk += G^T u + S'^T dp; da += colsum(S_{t-1} . dS'); G <- dS' diag(a).
#pragma omp simd
              for (int d = 0; d < K; ++d) {
                const T dsp = gr[d] + dp * kt[d];
                dkh[d] += gr[d] * u;
                dkh[d] += spr[d] * dp;
                dgl[d] += sprev[d] * dsp;
                mdg[d] += std::fabs(sprev[d]) * (std::fabs(gr[d]) + std::fabs(dp * kt[d]));
                gr[d] = dsp * a[d];
              }
            }
            for (int d = 0; d < K; ++d) {  // da -> d/dglog (da * alpha); its mag likewise
              dgl[d] *= a[d];
              mdg[d] *= a[d];
            }
            dB[i] = dbeta;
            mDb[i] = mag_db;
          }
        }
        }
        // Through the preprocessing, token by token.
        for (int64_t i = 0; i < L; ++i) {
          const int64_t t = sp.start + i;
          const int64_t qrow = ((sp.batch * p.T + t) * H + h) * K;
          if (p.use_qk_l2norm) {
            norm_backward(&qh[i * K], rq[i], &dQh[i * K], K, &g->dq[qrow]);
            norm_backward(&kh[i * K], rk[i], &dKh[i * K], K, &g->dk[qrow]);
          } else {
            for (int d = 0; d < K; ++d) {
              g->dq[qrow + d] += dQh[i * K + d];
              g->dk[qrow + d] += dKh[i * K + d];
            }
          }
          const int64_t orow = ((sp.batch * p.T + t) * HV + hv) * V;
          for (int vi = 0; vi < V; ++vi) g->dv[orow + vi] += dV[i * V + vi];
          const int64_t grow = ((sp.batch * p.T + t) * HV + hv) * K;
          for (int d = 0; d < K; ++d) {
            const GateGrad gg = gate_grad(p, x[i * K + d], exp_a, has_a, glog[i * K + d], dGl[i * K + d]);
            g->dg[grow + d] += gg.dx;
            if (gated) g->ddt_bias[hv * K + d] += gg.dx;
            if (has_a) g->dA_log[hv] += gg.dA;
            if (mags && alpha[i * K + d] > 0) {  // mags: the token reverse, which formed alpha
              const GateGrad unit = gate_grad(p, x[i * K + d], exp_a, has_a, glog[i * K + d], T(1));
              const T m = mDg[i * K + d];
              g->mag_dg[grow + d] += m * std::fabs(unit.dx);
              if (gated) g->mag_ddt_bias[hv * K + d] += m * std::fabs(unit.dx);
              if (has_a) g->mag_dA_log[hv] += m * std::fabs(unit.dA);
            }
          }
          T db = dB[i], mag_db = mags ? mDb[i] : T(0);
          if (p.beta_is_logits) {
            const T ds = (p.allow_neg_eigval ? T(2) : T(1)) * sigmoid_grad(braw[i]);
            db *= ds;
            mag_db *= ds;
          }
          if (mags) g->mag_dbeta[(sp.batch * p.T + t) * HV + hv] += mag_db;
          g->dbeta[(sp.batch * p.T + t) * HV + hv] += db;
        }
        if (p.has_initial_state())
          for (int vi = 0; vi < V; ++vi)
            for (int ki = 0; ki < K; ++ki) g->dh0[state_index(n, hv, vi, ki)] = G[vi * K + ki];
      }
    }
  }
  }
  return Status::Ok();
}

template Status backward<double>(const ForwardParams&, const double*, const double*, GradientsT<double>*, bool,
                                 double);

}  // namespace kda::reference
