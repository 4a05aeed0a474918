// backward_cpu.cpp: the CPU backend's chunked backward core (backward_cpu.h). Per chunk of C tokens (rows = tokens,
// S0 the state at the chunk start, dS the gradient of the state at its end; docs/backward.md):
//   forward:  M = lower(Q K^T . D), A' = strictly_lower(K K^T . D), T = (I + diag(beta) A')^-1,
//             W = T diag(beta) (K . E), U = T diag(beta) V - W S0^T, S_end = S0 diag(E_C) + U^T (K . Esuf)
//   reverse:  dU = M^T dO + (K . Esuf) dS^T,  dS0 = dO^T (Q . E) + dS diag(E_C) - dU^T W,  then the rest of the
//             chunk's gradients from dU, dS and S0 (chunked_sequence_backward below, line by line the safe form).
// D[r, c] = exp(sum of g over c+1 .. r) are the pair decays, E = exp(Gamma), Esuf = exp(sum over t+1 .. end).
// Products with D are matrix products through F = exp(Gamma - Gamma_C / 2): D[r, c] = F_r / F_c, and F, 1 / F stay
// within exp(|Gamma_C| / 2) of 1, which float64 holds for any fp32-representable q, k while |Gamma_C| <= 1000 nats
// (factors within e^+-500, inputs within e^+-104). A chunk that decays further takes the pairwise form, every
// D[r, c] an exp of its own sum (exact for any decay, O(C^2 K) exps: only hostile gates get there).
// Float64 throughout: the backward verifier's fp32 bound does not yet cover dbeta's cancellation where keys repeat
// (bench/LEDGER.md), so the CPU backend stays exact to fp64 and gains its speed from the chunked form's matrix
// products instead of the token reverse's rank-one updates.
#include "cpu/backward_cpu.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <vector>

namespace kda::cpu {
namespace {

using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using CMap = Eigen::Map<const Mat>;
using MMap = Eigen::Map<Mat>;

constexpr double kMaxFactoredDecay = 1000.0;  // nats over a chunk (see the top of the file)

// One chunk's pair decays D, as F (factored) or explicitly.
struct PairDecay {
  int n = 0, K = 0;
  bool factored = true;
  Mat F;                  // n x K: exp(Gamma - Gamma_C / 2)
  std::vector<double> D;  // n x n x K: D[r, c, d] for r >= c (explicit form only)

  void build(const Mat& G) {  // G: the chunk's log-decays, n x K
    n = static_cast<int>(G.rows());
    K = static_cast<int>(G.cols());
    Mat gam = G;
    for (int t = 1; t < n; ++t) gam.row(t) += gam.row(t - 1);
    factored = gam.row(n - 1).cwiseAbs().maxCoeff() <= kMaxFactoredDecay;
    if (factored) {
      F = (gam.rowwise() - 0.5 * gam.row(n - 1)).array().exp().matrix();
      return;
    }
    D.assign(static_cast<size_t>(n) * n * K, 0.0);
    for (int c = 0; c < n; ++c) {
      std::vector<double> acc(K, 0.0);
      for (int r = c; r < n; ++r) {
        if (r > c)
          for (int d = 0; d < K; ++d) acc[d] += G(r, d);
        for (int d = 0; d < K; ++d) D[(static_cast<size_t>(r) * n + c) * K + d] = std::exp(acc[d]);
      }
    }
  }
  double at(int r, int c, int d) const { return D[(static_cast<size_t>(r) * n + c) * K + d]; }

  // P[r, c] = sum_d X[r, d] Y[c, d] D[r, c, d] for r >= c (r > c if strict), 0 elsewhere.
  Mat pair_form(const Mat& X, const Mat& Y, bool strict) const {
    Mat P = Mat::Zero(n, n);
    if (factored) {
      P.noalias() = (X.array() * F.array()).matrix() * (Y.array() / F.array()).matrix().transpose();
    } else {
      for (int r = 0; r < n; ++r)
        for (int c = 0; c <= r; ++c) {
          double s = 0;
          for (int d = 0; d < K; ++d) s += X(r, d) * Y(c, d) * at(r, c, d);
          P(r, c) = s;
        }
    }
    if (strict)
      P.triangularView<Eigen::Upper>().setZero();
    else
      P.triangularView<Eigen::StrictlyUpper>().setZero();
    return P;
  }
  // Z[r] = sum_c Wm[r, c] Y[c] . D[r, c] (Wm lower triangular): the row end's side of a pair product.
  Mat row_side(const Mat& Wm, const Mat& Y) const {
    if (factored) return ((Wm * (Y.array() / F.array()).matrix()).array() * F.array()).matrix();
    Mat Z = Mat::Zero(n, K);
    for (int r = 0; r < n; ++r)
      for (int c = 0; c <= r; ++c)
        if (Wm(r, c) != 0.0)
          for (int d = 0; d < K; ++d) Z(r, d) += Wm(r, c) * Y(c, d) * at(r, c, d);
    return Z;
  }
  // Z[c] = sum_r Wm[r, c] X[r] . D[r, c] (Wm lower triangular): the column end's side.
  Mat col_side(const Mat& Wm, const Mat& X) const {
    if (factored) return ((Wm.transpose() * (X.array() * F.array()).matrix()).array() / F.array()).matrix();
    Mat Z = Mat::Zero(n, K);
    for (int r = 0; r < n; ++r)
      for (int c = 0; c <= r; ++c)
        if (Wm(r, c) != 0.0)
          for (int d = 0; d < K; ++d) Z(c, d) += Wm(r, c) * X(r, d) * at(r, c, d);
    return Z;
  }
};

// A chunk's forward quantities (rows t0 .. t0 + n - 1 of the sequence).
struct Chunk {
  Mat Q, Kk, Vv, G, dO;     // Q scaled by `scale`
  Eigen::VectorXd beta;
  Mat E, Esuf;              // exp(Gamma), exp(sum over t+1 .. end) (suffix sums accumulated backwards)
  Eigen::RowVectorXd EC;    // exp(Gamma_C)
  PairDecay pd;
  Mat M, Ap, Amat;          // A_qk (lower), A' (strictly lower), diag(beta) A'
  Mat U0, W, U;             // T diag(beta) V, T diag(beta) (K . E), V_new

  // with_q: also Q, dO and M, which only the reverse uses (the forward's sweep needs the states alone).
  void load(int64_t t0, int n, int K, int V, double scale, const double* qh, const double* kh, const double* v,
            const double* glog, const double* beta_in, const double* dout, bool with_q) {
    Kk = CMap(kh + t0 * K, n, K);
    Vv = CMap(v + t0 * V, n, V);
    G = CMap(glog + t0 * K, n, K);
    if (with_q) {
      Q = scale * CMap(qh + t0 * K, n, K);
      dO = CMap(dout + t0 * V, n, V);
    }
    beta = Eigen::Map<const Eigen::VectorXd>(beta_in + t0, n);
    Mat gam = G;
    for (int t = 1; t < n; ++t) gam.row(t) += gam.row(t - 1);
    E = gam.array().exp().matrix();
    EC = E.row(n - 1);
    Mat suf = Mat::Zero(n, K);
    for (int t = n - 2; t >= 0; --t) suf.row(t) = suf.row(t + 1) + G.row(t + 1);
    Esuf = suf.array().exp().matrix();
    pd.build(G);
    if (with_q) M = pd.pair_form(Q, Kk, false);
    Ap = pd.pair_form(Kk, Kk, true);
    Amat = beta.asDiagonal() * Ap;
  }
  // U0, W, U against the chunk-start state S0 [V, K].
  void solve(const Mat& S0) {
    U0 = beta.asDiagonal() * Vv;
    Amat.triangularView<Eigen::UnitLower>().solveInPlace(U0);
    W = beta.asDiagonal() * (Kk.array() * E.array()).matrix();
    Amat.triangularView<Eigen::UnitLower>().solveInPlace(W);
    U = U0;
    U.noalias() -= W * S0.transpose();
  }
};

}  // namespace

void chunked_sequence_backward(int64_t L, int K, int V, double scale, const double* qh, const double* kh,
                               const double* v, const double* glog, const double* beta, const double* dout,
                               const double* S, double* Gout, double* dqh, double* dkh, double* dv, double* dglog,
                               double* dbeta, int C) {
  const int64_t chunks = (L + C - 1) / C;
  // Forward: the state at every chunk start.
  std::vector<Mat> starts(static_cast<size_t>(chunks));
  Mat St = CMap(S, V, K);
  Chunk ch;
  for (int64_t ci = 0; ci < chunks; ++ci) {
    const int64_t t0 = ci * C;
    const int n = static_cast<int>(std::min<int64_t>(C, L - t0));
    starts[ci] = St;
    ch.load(t0, n, K, V, scale, qh, kh, v, glog, beta, dout, false);
    ch.solve(St);
    Mat next = St * ch.EC.asDiagonal();
    next.noalias() += ch.U.transpose() * (ch.Kk.array() * ch.Esuf.array()).matrix();
    St = next;
  }
  // Reverse, from the last chunk.
  Mat dS = CMap(Gout, V, K);
  for (int64_t ci = chunks - 1; ci >= 0; --ci) {
    const int64_t t0 = ci * C;
    const int n = static_cast<int>(std::min<int64_t>(C, L - t0));
    const Mat& S0 = starts[ci];
    ch.load(t0, n, K, V, scale, qh, kh, v, glog, beta, dout, true);
    ch.solve(S0);
    const Mat KG = (ch.Kk.array() * ch.E.array()).matrix();
    const Mat KD = (ch.Kk.array() * ch.Esuf.array()).matrix();
    const Mat QG = (ch.Q.array() * ch.E.array()).matrix();
    // The serial chain: dU, then the gradient of the chunk-start state.
    Mat dU = ch.M.transpose() * ch.dO;
    dU.noalias() += KD * dS.transpose();
    Mat dS0 = ch.dO.transpose() * QG;
    dS0 += dS * ch.EC.asDiagonal();
    dS0.noalias() -= dU.transpose() * ch.W;
    // The rest of the chunk.
    Mat dM = ch.dO * ch.U.transpose();
    dM.triangularView<Eigen::StrictlyUpper>().setZero();
    const Mat dKD = ch.U * dS;
    const Mat dW = -dU * S0;
    // dBV = T^T dU, dBK = T^T dW: the transposed unit-triangular solve.
    Mat dBV = dU, dBK = dW;
    ch.Amat.transpose().triangularView<Eigen::UnitUpper>().solveInPlace(dBV);
    ch.Amat.transpose().triangularView<Eigen::UnitUpper>().solveInPlace(dBK);
    Mat dA = -(dBV * ch.U0.transpose() + dBK * ch.W.transpose());  // -T^T dT T^T
    dA.triangularView<Eigen::Upper>().setZero();
    const Eigen::VectorXd db = (dA.array() * ch.Ap.array()).rowwise().sum() +
                               (dBV.array() * ch.Vv.array()).rowwise().sum() +
                               (dBK.array() * KG.array()).rowwise().sum();
    const Mat dAp = ch.beta.asDiagonal() * dA;
    const Mat dq_QG = ((ch.dO * S0).array() * ch.E.array()).matrix();
    const Mat dq_M = ch.pd.row_side(dM, ch.Kk);
    const Mat dk_M = ch.pd.col_side(dM, ch.Q);
    const Mat dk_Arow = ch.pd.row_side(dAp, ch.Kk);
    const Mat dk_Acol = ch.pd.col_side(dAp, ch.Kk);
    const Mat dk_KG = ((ch.beta.asDiagonal() * dBK).array() * ch.E.array()).matrix();
    const Mat dk_KD = (dKD.array() * ch.Esuf.array()).matrix();
    const Mat dqs = dq_QG + dq_M;
    // The log-decay's gradient. Every exponent of the chunk is a sum of g over a run of its tokens; d/dg_s collects
    // the coefficient of every run that contains s, summed directly over those runs. (The shorter route, the reverse
    // cumsum of dGam = q dq - k dk_M ..., cancels the pairs that lie wholly after s, exactly in exact arithmetic
    // but not in floating point, where their residue swamps the gradient of a channel a huge decay cut off.)
    Mat dgl = Mat::Zero(n, K);
    {
      // Runs 0 .. t (exp(Gam_t) in Qg and in W's rows): coefficient q dq_QG + k dk_KG at t, for every s <= t.
      const Mat head = (ch.Q.array() * dq_QG.array() + ch.Kk.array() * dk_KG.array()).matrix();
      Eigen::RowVectorXd acc = Eigen::RowVectorXd::Zero(K);
      for (int t = n - 1; t >= 0; --t) {
        acc += head.row(t);
        dgl.row(t) += acc;
      }
      // Runs t+1 .. end (exp(sum over t+1 .. end) in K . Esuf): coefficient k dk_KD at t, for every s > t.
      acc.setZero();
      for (int t = 0; t < n; ++t) {
        dgl.row(t) += acc;
        acc += (ch.Kk.row(t).array() * dk_KD.row(t).array()).matrix();
      }
      // The whole chunk (S0's decay exp(Gam_C)).
      dgl.rowwise() += ((S0.array() * dS.array()).colwise().sum() * ch.EC.array()).matrix();
      // Pairs c+1 .. r of A_qk and A': X[r, c] = (dM[r, c] q_r + dA'[r, c] k_r) k_c D[r, c], for every c < s <= r.
      // Factored, D[r, c] = F_r / F_c splits between the two ends: X[r, c] = (dM[r, c] qF_r + dA'[r, c] kF_r) kf_c
      // with qF = q F, kF = k F, kf = k / F formed once (a division a pair and channel was most of this loop).
      Eigen::ArrayXd pre(K);
      Mat qF, kF, kf;
      if (ch.pd.factored) {
        qF = (ch.Q.array() * ch.pd.F.array()).matrix();
        kF = (ch.Kk.array() * ch.pd.F.array()).matrix();
        kf = (ch.Kk.array() / ch.pd.F.array()).matrix();
      }
      for (int r = 1; r < n; ++r) {
        pre.setZero();
        for (int c = 0; c < r; ++c) {
          const double wm = dM(r, c), wa = dAp(r, c);
          if (ch.pd.factored) {
            pre += ((wm * qF.row(r).array() + wa * kF.row(r).array()) * kf.row(c).array()).transpose();
          } else {
            for (int d = 0; d < K; ++d)
              pre(d) += (wm * ch.Q(r, d) + wa * ch.Kk(r, d)) * ch.Kk(c, d) * ch.pd.at(r, c, d);
          }
          // pre: the sum over c' <= c of X[r, c']
          dgl.row(c + 1) += pre.matrix().transpose();  // s = c + 1 <= r
        }
      }
    }
    const Mat& dgam = dgl;
    MMap(dqh + t0 * K, n, K) = scale * dqs;
    MMap(dkh + t0 * K, n, K) = dk_M + dk_Arow + dk_Acol + dk_KG + dk_KD;
    MMap(dv + t0 * V, n, V) = ch.beta.asDiagonal() * dBV;
    MMap(dglog + t0 * K, n, K) = dgam;
    Eigen::Map<Eigen::VectorXd>(dbeta + t0, n) = db;
    dS = dS0;
  }
  MMap(Gout, V, K) = dS;
}

}  // namespace kda::cpu
