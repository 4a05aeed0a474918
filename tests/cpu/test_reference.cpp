// test_reference.cpp: the float64 reference against cases derived by hand: T = 1 and T = 2 in closed form
// (S_t = S_{t-1} Diag(alpha_t) (I - beta_t k_t k_t^T) + beta_t v_t k_t^T, written here with Eigen, independent of
// the reference's loop), basis-vector cases whose outputs are plain numbers, and the preprocessing formulas.
#include <gtest/gtest.h>

#include <Eigen/Dense>
#include <cmath>

#include "common/cases.h"
#include "common/compare.h"

namespace kda::testing {
namespace {

using MatD = Eigen::MatrixXd;
using VecD = Eigen::VectorXd;

// Reads token t, head h of a [1, T, H, D] host tensor as a vector.
VecD row(const HostTensor& x, int64_t t, int h) {
  const int64_t H = x.shape[2], D = x.shape[3];
  VecD r(D);
  for (int64_t d = 0; d < D; ++d) r(d) = x.at((t * H + h) * D + d);
  return r;
}

double softplus(double x) { return x > 20 ? x : std::log1p(std::exp(x)); }
double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

// The T <= 2 closed form for one head of a B = 1 case; every preprocessing formula written out again here.
void closed_form(const Case& c, int hv, std::vector<VecD>* outs, MatD* final_state) {
  const CaseSpec& s = c.spec;
  const int K = s.K, V = s.V, h = hv / (s.HV / s.H);
  MatD S = MatD::Zero(V, K);
  if (s.has_h0)
    for (int vi = 0; vi < V; ++vi)
      for (int ki = 0; ki < K; ++ki) S(vi, ki) = c.h0.at((hv * V + vi) * K + ki);
  const double scale = s.default_scale ? 1 / std::sqrt(double(K)) : s.scale;
  for (int64_t t = 0; t < s.T; ++t) {
    VecD q = row(c.q, t, h), k = row(c.k, t, h), v = row(c.v, t, hv), g = row(c.g, t, hv);
    if (s.l2norm) {
      q /= std::sqrt(q.squaredNorm() + 1e-6);
      k /= std::sqrt(k.squaredNorm() + 1e-6);
    }
    VecD alpha(K);
    for (int ki = 0; ki < K; ++ki) {
      double gl = g(ki);
      const double bias = c.dt_bias.present() ? c.dt_bias.at(hv * K + ki) : 0;
      if (s.gate == KDA_GATE_SOFTPLUS) gl = -std::exp(c.A_log.at(hv)) * softplus(gl + bias);
      if (s.gate == KDA_GATE_BOUNDED)
        gl = s.lower_bound * sigmoid((c.A_log.present() ? std::exp(c.A_log.at(hv)) : 1.0) * (gl + bias));
      alpha(ki) = std::exp(gl);
    }
    double b = c.beta.at(t * s.HV + hv);
    if (s.beta_logits) b = sigmoid(b);
    if (s.neg_eigval) b *= 2;
    S = S * alpha.asDiagonal() * (MatD::Identity(K, K) - b * k * k.transpose()) + b * v * k.transpose();
    outs->push_back(scale * S * q);
  }
  *final_state = S;
}

void expect_reference_matches_closed_form(CaseSpec s) {
  const uint64_t seed = run_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (replay: KDA_SEED=" + std::to_string(seed) + ")");
  Case c = make_case(s, seed);
  Oracle o = run_oracle(c);
  for (int hv = 0; hv < s.HV; ++hv) {
    std::vector<VecD> outs;
    MatD S;
    closed_form(c, hv, &outs, &S);
    for (int64_t t = 0; t < s.T; ++t)
      for (int vi = 0; vi < s.V; ++vi) {
        const double ref = outs[t](vi), got = o.out.at((t * s.HV + hv) * s.V + vi);
        // Two float64 evaluations of the same sums in different orders: agreement to ~1e-13 relative.
        EXPECT_NEAR(got, ref, 1e-12 * (1 + std::fabs(ref))) << "t=" << t << " hv=" << hv << " v=" << vi;
      }
    for (int vi = 0; vi < s.V; ++vi)
      for (int ki = 0; ki < s.K; ++ki)
        EXPECT_NEAR(o.final_state.at((hv * s.V + vi) * s.K + ki), S(vi, ki), 1e-12 * (1 + std::fabs(S(vi, ki))));
  }
}

CaseSpec tiny(int T, kda_gate_mode_t gate) {
  CaseSpec s;
  s.name = "tiny";
  s.T = T;
  s.H = 1;
  s.HV = 2;
  s.K = 16;
  s.V = 32;
  s.gate = gate;
  s.in_dtype = s.g_dtype = s.beta_dtype = KDA_DTYPE_FLOAT32;
  return s;
}

TEST(Reference, ClosedFormT1AllGates) {
  for (auto gate : {KDA_GATE_LOG_DECAY, KDA_GATE_SOFTPLUS, KDA_GATE_BOUNDED}) expect_reference_matches_closed_form(tiny(1, gate));
}

TEST(Reference, ClosedFormT2AllGates) {
  for (auto gate : {KDA_GATE_LOG_DECAY, KDA_GATE_SOFTPLUS, KDA_GATE_BOUNDED}) expect_reference_matches_closed_form(tiny(2, gate));
}

TEST(Reference, ClosedFormT2Variants) {
  CaseSpec s = tiny(2, KDA_GATE_BOUNDED);
  s.has_A_log = false;
  s.neg_eigval = true;
  s.l2norm = false;
  s.default_scale = false;
  s.scale = 0.37f;
  expect_reference_matches_closed_form(s);
  s = tiny(2, KDA_GATE_SOFTPLUS);
  s.beta_logits = false;
  s.has_h0 = false;
  expect_reference_matches_closed_form(s);
}

// Basis vectors: k = q = e0, no decay on token 1, decay 1/2 on channel 0 at token 2, beta = 1/2 then 1/4:
//   o1 = scale * b1 * v1;  o2 = scale * (a b1 v1 + b2 (v2 - a b1 v1)) with a = exp(fp32(log 1/2)).
TEST(Reference, BasisVectorsGivePlainNumbers) {
  CaseSpec s = tiny(2, KDA_GATE_LOG_DECAY);
  s.HV = 1;
  s.l2norm = false;
  s.beta_logits = false;
  s.has_h0 = false;
  s.default_scale = false;
  s.scale = 2.0f;
  Case c = make_case(s, 1);
  for (int64_t i = 0; i < c.q.numel(); ++i) c.q.set(i, i % s.K == 0 ? 1.0 : 0.0);
  for (int64_t i = 0; i < c.k.numel(); ++i) c.k.set(i, i % s.K == 0 ? 1.0 : 0.0);
  for (int64_t i = 0; i < c.g.numel(); ++i) c.g.set(i, 0.0);
  c.g.set(s.K + 0, std::log(0.5));
  c.beta.set(0, 0.5);
  c.beta.set(1, 0.25);
  for (int vi = 0; vi < s.V; ++vi) {
    c.v.set(vi, vi + 1);
    c.v.set(s.V + vi, -2.0 * vi);
  }
  Oracle o = run_oracle(c);
  const double a = std::exp(c.g.at(s.K));  // 1/2 up to the fp32 rounding of log(1/2)
  EXPECT_NEAR(a, 0.5, 1e-7);
  for (int vi = 0; vi < s.V; ++vi) {
    const double v1 = vi + 1, v2 = -2.0 * vi;
    EXPECT_DOUBLE_EQ(o.out.at(vi), 2.0 * 0.5 * v1);
    const double s1 = a * 0.5 * v1;
    EXPECT_DOUBLE_EQ(o.out.at(s.V + vi), 2.0 * (s1 + 0.25 * (v2 - s1)));
    EXPECT_DOUBLE_EQ(o.final_state.at(vi * s.K + 0), s1 + 0.25 * (v2 - s1));
    EXPECT_DOUBLE_EQ(o.final_state.at(vi * s.K + 1), 0.0);
  }
}

// Sequences never see each other: a packed batch equals its sequences run one by one.
TEST(Reference, PackedSequencesAreIndependent) {
  CaseSpec s = tiny(0, KDA_GATE_BOUNDED);
  s.seqlens = {3, 0, 5};
  const uint64_t seed = run_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Case packed = make_case(s, seed);
  Oracle all = run_oracle(packed);
  int64_t start = 0;
  for (size_t n = 0; n < s.seqlens.size(); ++n) {
    CaseSpec one = s;
    one.seqlens.clear();
    one.T = s.seqlens[n];
    Case c = make_case(one, seed);
    auto copy_tokens = [&](HostTensor& dst, const HostTensor& src) {
      const int64_t per_token = src.numel() / src.shape[1];
      for (int64_t i = 0; i < one.T * per_token; ++i) dst.set(i, src.at(start * per_token + i));
    };
    copy_tokens(c.q, packed.q);
    copy_tokens(c.k, packed.k);
    copy_tokens(c.v, packed.v);
    copy_tokens(c.g, packed.g);
    copy_tokens(c.beta, packed.beta);
    c.A_log = packed.A_log;
    c.dt_bias = packed.dt_bias;
    const int64_t per_seq = packed.h0.numel() / packed.h0.shape[0];
    for (int64_t i = 0; i < per_seq; ++i) c.h0.set(i, packed.h0.at(static_cast<int64_t>(n) * per_seq + i));
    Oracle o = run_oracle(c);
    const int64_t per_token_out = o.out.numel() / std::max<int64_t>(one.T, 1);
    for (int64_t i = 0; i < one.T * per_token_out; ++i) EXPECT_EQ(o.out.at(i), all.out.at(start * per_token_out + i));
    for (int64_t i = 0; i < per_seq; ++i)
      EXPECT_EQ(o.final_state.at(i), all.final_state.at(static_cast<int64_t>(n) * per_seq + i));
    start += one.T;
  }
}

}  // namespace
}  // namespace kda::testing
