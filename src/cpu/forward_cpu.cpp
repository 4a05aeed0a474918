// forward_cpu.cpp: the CPU backend. Chunked WY form of the recurrence in fp32 with an fp32 state, the matrix
// products through Eigen, one OpenMP task per (sequence, value head).
//
// Exponent arrangement (why no gate can overflow it). With Gamma the cumulative log-decay inside a chunk
// (non-increasing, every g_log <= 0), the intra-chunk coefficients need exp(Gamma_r - Gamma_c) for c <= r.
// Factoring that as exp(Gamma_r) * exp(-Gamma_c) overflows once a chunk decays past ~88 nats, which the
// unbounded softplus gate does routinely. Instead, for the rows of 16-token block I (first row r0):
//   - pairs inside the block: factored through its mid point, F = exp(Gloc - S / 2) (factored_block), where the
//     factors stay normal; else exp(Gamma_r - Gamma_c) directly (one exp per pair and channel), the exponent
//     summed over the tokens c + 1 .. r;
//   - pairs with c < r0 split at the reference point r0 - 1, which lies between c and r:
//       exp(Gamma_r - Gamma_{r0-1}) * exp(Gamma_{r0-1} - Gamma_c), both factors <= 1,
//     so nothing overflows, and a factor underflows only when the exact product is below 1e-38.
// Every exponent is a sum of g over the tokens between the two points, accumulated locally (block-relative
// prefix sums, suffix sums) rather than as a difference of two large chunk-level prefix sums, so its absolute
// error stays at the rounding of the terms it spans. The inter-chunk terms use exp(Gamma_r) and
// exp(Gamma_last - Gamma_r), both <= 1.
#include "cpu/forward_cpu.h"

#include <Eigen/Dense>
#include <algorithm>
#include <limits>
#include <vector>

#include "common/host_token.h"
#include "common/threads.h"

namespace kda::cpu {
namespace {

using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using RowVec = Eigen::Matrix<float, 1, Eigen::Dynamic>;

// One worker's buffers, sized once for the largest chunk.
struct Workspace {
  Mat S;                 // V x K running state, value-first
  Mat Q, Kk, Vv, G;      // chunk inputs: q_hat, k_hat (C x K), v (C x V), g_log (C x K)
  Eigen::VectorXf beta;  // C
  Mat Gam;               // C x K: cumulative log-decay from the chunk start (inclusive)
  Mat Gloc;              // C x K: cumulative log-decay from the start of the token's 16-block (inclusive)
  Mat Akk, Aqk;          // C x C intra-chunk coefficients (Akk strictly lower and scaled by beta)
  Mat Rhs;               // C x (V + K): [beta * V | beta * exp(Gam) . K]; solved in place into [U | W]
  Mat Vnew, O;           // C x V
  Mat Qg, Kdec, EG;      // C x K: exp(Gam) . Q, exp(Gam_last - Gam) . K and exp(Gam)
  Mat Kr, Qr, Kc;        // block rows scaled to the reference point, and the earlier rows scaled from it
  Mat E;                 // kSubBlock x K: exp(Gamma_r - Gamma_c) . k_c for the rows r of one column c
  Mat F, Qf, Kf, Kb;     // kSubBlock x K: a block's factored operands (see factored_block)
  RowVec suffix;         // K

  Workspace(int C, int K, int V)
      : S(V, K), Q(C, K), Kk(C, K), Vv(C, V), G(C, K), beta(C), Gam(C, K), Gloc(C, K), Akk(C, C), Aqk(C, C),
        Rhs(C, V + K), Vnew(C, V), O(C, V), Qg(C, K), Kdec(C, K), EG(C, K), Kr(kSubBlock, K), Qr(kSubBlock, K), Kc(C, K),
        E(kSubBlock, K), F(kSubBlock, K), Qf(kSubBlock, K), Kf(kSubBlock, K), Kb(kSubBlock, K), suffix(K) {}
};

// True where x * scale keeps the value exactly representable as a normal float (or x is 0): nothing the products
// below take has overflowed, or flushed a nonzero input below the normal range.
template <typename A, typename B>
bool all_normal(const A& scaled, const B& raw) {
  const float big = std::numeric_limits<float>::max(), tiny = std::numeric_limits<float>::min();
  return ((scaled.array().abs() <= big) && ((scaled.array().abs() >= tiny) || (raw.array() == 0.0f))).all();
}

// The block r0 .. r0 + nb - 1's pairs through a reference point in mid-block: with Gloc the block's inclusive
// prefix sums of g and S its total, exp(Gamma_r - Gamma_c) = F_r / F_c for F = exp(Gloc - S / 2), and F and 1 / F
// stay within exp(|S| / 2) of 1, so Aqk = (Q . F) (K / F)^T and Akk = (K . F) (K / F)^T are two small matrix
// products instead of one exp per (row, column, channel). False (nothing written) where an operand would leave the
// normal range (|S| past ~170 nats, or tiny q / k with a large |S|): the caller keeps the pairwise form there. The
// same factoring as the CUDA phase 1's S1 (chunk_prepare.cu); the CPU model (scripts/models/two_phase.py --precision
// diag=3xtf32) measured its errors on the verifier's stress probes.
bool factored_block(Workspace& w, int r0, int nb) {
  auto f = w.F.topRows(nb);
  f = (w.Gloc.middleRows(r0, nb).rowwise() - 0.5f * w.Gloc.row(r0 + nb - 1)).array().exp().matrix();
  auto qf = w.Qf.topRows(nb), kf = w.Kf.topRows(nb), kb = w.Kb.topRows(nb);
  qf = (w.Q.middleRows(r0, nb).array() * f.array()).matrix();
  kf = (w.Kk.middleRows(r0, nb).array() * f.array()).matrix();
  kb = (w.Kk.middleRows(r0, nb).array() / f.array()).matrix();
  if (!all_normal(qf, w.Q.middleRows(r0, nb)) || !all_normal(kf, w.Kk.middleRows(r0, nb)) ||
      !all_normal(kb, w.Kk.middleRows(r0, nb)))
    return false;
  w.Aqk.block(r0, r0, nb, nb).noalias() = qf * kb.transpose();
  w.Akk.block(r0, r0, nb, nb).noalias() = kf * kb.transpose();
  w.Aqk.block(r0, r0, nb, nb).triangularView<Eigen::StrictlyUpper>().setZero();
  w.Akk.block(r0, r0, nb, nb).triangularView<Eigen::Upper>().setZero();
  return true;
}

// The intra-chunk coefficient matrices Akk (c < r, before the beta scaling) and Aqk (c <= r) for L tokens.
void intra_chunk_coefficients(Workspace& w, int L) {
  w.Akk.topLeftCorner(L, L).setZero();
  w.Aqk.topLeftCorner(L, L).setZero();
  for (int r0 = 0; r0 < L; r0 += kSubBlock) {
    const int r1 = std::min(r0 + kSubBlock, L), nb = r1 - r0;
    // Pairs inside the block: factored through its mid point where that stays in range; else exp(Gamma_r -
    // Gamma_c) with the exponent summed from token c + 1 to r (never a difference of two block sums, which would
    // carry the rounding of any huge decay before c), one column c at a time, so each step is a (rows x K) array
    // expression rather than a K-long one per pair.
    for (int c = factored_block(w, r0, nb) ? r1 : r0; c < r1; ++c) {
      const int n = r1 - c;  // rows r = c .. r1 - 1
      auto e = w.E.topRows(n);
      e.row(0).setZero();
      for (int i = 1; i < n; ++i) e.row(i) = e.row(i - 1) + w.G.row(c + i);
      e = (e.array().exp().rowwise() * w.Kk.row(c).array()).matrix();
      w.Aqk.col(c).segment(c, n) = (w.Q.middleRows(c, n).array() * e.array()).rowwise().sum().matrix();
      if (n > 1)
        w.Akk.col(c).segment(c + 1, n - 1) =
            (w.Kk.middleRows(c + 1, n - 1).array() * e.bottomRows(n - 1).array()).rowwise().sum().matrix();
    }
    if (r0 == 0) continue;
    // Rows r in the block against all columns c < r0, through the reference point r0 - 1.
    w.F.topRows(nb) = w.Gloc.middleRows(r0, nb).array().exp().matrix();  // one exp per element for both
    w.Kr.topRows(nb) = (w.Kk.middleRows(r0, nb).array() * w.F.topRows(nb).array()).matrix();
    w.Qr.topRows(nb) = (w.Q.middleRows(r0, nb).array() * w.F.topRows(nb).array()).matrix();
    w.suffix.setZero();  // sum of g over (c, r0 - 1]
    for (int c = r0 - 1; c >= 0; --c) {
      w.Kc.row(c) = (w.Kk.row(c).array() * w.suffix.array().exp()).matrix();
      w.suffix += w.G.row(c);
    }
    w.Akk.block(r0, 0, nb, r0).noalias() = w.Kr.topRows(nb) * w.Kc.topRows(r0).transpose();
    w.Aqk.block(r0, 0, nb, r0).noalias() = w.Qr.topRows(nb) * w.Kc.topRows(r0).transpose();
  }
}

void run_sequence(const ForwardParams& p, const SequenceSpan& sp, int64_t n, int hv, int C, Workspace& w) {
  const int K = p.K, V = p.V;
  for (int vi = 0; vi < V; ++vi)
    for (int ki = 0; ki < K; ++ki)
      w.S(vi, ki) = p.has_initial_state()
                        ? static_cast<const float*>(p.initial_state.data)[p.state_offset(p.initial_state.stride, n,
                                                                                          hv, vi, ki)]
                        : 0.0f;

  // Prefix-cache checkpoints: a chunk also ends at every checkpoint's token count, so the state is on hand there.
  HostCheckpoints ckpts(p, n, hv, sp.length);
  auto state = [&](int vi, int ki) { return w.S(vi, ki); };
  ckpts.write(0, state);

  for (int64_t c0 = 0; c0 < sp.length;) {
    int64_t len = std::min<int64_t>(C, sp.length - c0);
    if (ckpts.next_count() >= 0) len = std::min(len, ckpts.next_count() - c0);  // > 0: counts <= c0 are written
    const int L = static_cast<int>(len);
    for (int i = 0; i < L; ++i)
      load_token<float>(p, sp.batch, sp.start + c0 + i, hv, w.Q.row(i).data(), w.Kk.row(i).data(),
                        w.Vv.row(i).data(), w.G.row(i).data(), &w.beta(i));
    for (int i = 0; i < L; ++i) {
      if (i == 0)
        w.Gam.row(i) = w.G.row(i);
      else
        w.Gam.row(i) = w.Gam.row(i - 1) + w.G.row(i);
      if (i % kSubBlock == 0)
        w.Gloc.row(i) = w.G.row(i);
      else
        w.Gloc.row(i) = w.Gloc.row(i - 1) + w.G.row(i);
    }
    intra_chunk_coefficients(w, L);
    w.EG.topRows(L) = w.Gam.topRows(L).array().exp().matrix();  // exp(Gam): W's rows and Qg both take it

    // [U | W] = (I + diag(beta) tril(Akk, -1))^-1 [diag(beta) V | diag(beta) exp(Gam) . K]
    auto akk = w.Akk.topLeftCorner(L, L);
    akk = w.beta.head(L).asDiagonal() * akk;
    auto rhs = w.Rhs.topRows(L);
    rhs.leftCols(V) = w.beta.head(L).asDiagonal() * w.Vv.topRows(L);
    rhs.rightCols(K) =
        w.beta.head(L).asDiagonal() * (w.Kk.topRows(L).array() * w.EG.topRows(L).array()).matrix();
    akk.triangularView<Eigen::UnitLower>().solveInPlace(rhs);

    // V_new = U - W S^T: the corrections the chunk writes, against the state at the chunk start.
    auto vnew = w.Vnew.topRows(L);
    vnew.noalias() = rhs.leftCols(V);
    vnew.noalias() -= rhs.rightCols(K) * w.S.transpose();

    // O = scale * ((exp(Gam) . Q) S^T + tril(Aqk) V_new)
    auto qg = w.Qg.topRows(L);
    qg = (w.Q.topRows(L).array() * w.EG.topRows(L).array()).matrix();
    auto o = w.O.topRows(L);
    o.noalias() = qg * w.S.transpose();
    o.noalias() += w.Aqk.topLeftCorner(L, L).triangularView<Eigen::Lower>() * vnew;
    o *= p.scale;
    for (int i = 0; i < L; ++i) {
      const int64_t t = sp.start + c0 + i;
      store_row<float>(p.out, p.out_dtype,
                       sp.batch * p.out_stride[0] + t * p.out_stride[1] + hv * p.out_stride[2], p.out_stride[3], V,
                       w.O.row(i).data());
    }

    // S <- S diag(exp(Gam_last)) + V_new^T (exp(Gam_last - Gam) . K), the suffix sums taken backwards.
    w.suffix.setZero();
    for (int i = L - 1; i >= 0; --i) {
      w.Kdec.row(i) = (w.Kk.row(i).array() * w.suffix.array().exp()).matrix();
      w.suffix += w.G.row(i);
    }
    w.S = w.S * w.Gam.row(L - 1).array().exp().matrix().asDiagonal();
    w.S.noalias() += vnew.transpose() * w.Kdec.topRows(L);
    c0 += L;
    ckpts.write(c0, state);
  }

  if (p.has_final_state())
    for (int vi = 0; vi < V; ++vi)
      for (int ki = 0; ki < K; ++ki)
        static_cast<float*>(p.final_state)[p.state_offset(p.final_state_stride, n, hv, vi, ki)] = w.S(vi, ki);
}

}  // namespace

Status forward(const ForwardParams& p) {
  const std::vector<SequenceSpan> seqs = host_sequences(p);
  const int C = p.chunk_size > 0 ? p.chunk_size : kDefaultChunk;
  const int64_t tasks = p.N * p.HV;
#pragma omp parallel num_threads(worker_threads(p.cpu_threads))
  {
    Workspace w(C, p.K, p.V);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task)
      run_sequence(p, seqs[task / p.HV], task / p.HV, static_cast<int>(task % p.HV), C, w);
  }
  return Status::Ok();
}

}  // namespace kda::cpu
