// test_backward.cpp: the float64 reference backward against central finite differences of the float64 reference
// forward, on float64 inputs: loss = sum(dO . o) + sum(dS . S_final) for random dO, dS; every differentiable input
// (q, k, v, raw g, raw beta, A_log, dt_bias, h0) probed at random elements, for each gate, with and without the
// L2 norm, beta as logits (with negative eigenvalues) and as probabilities, grouped heads, packed sequences longer
// than the backward's 64-token recompute segments, and both state layouts.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "common/cases.h"
#include "common/compare.h"
#include "common/suites.h"
#include "reference/backward.h"
#include "api/validate.h"
#include "common/math.h"

namespace kda::testing {
namespace {

HostTensor to_f64(const HostTensor& t) {
  if (!t.present()) return t;
  HostTensor r = make_tensor(KDA_DTYPE_FLOAT64, t.shape);
  for (int64_t i = 0; i < t.numel(); ++i) r.set(i, t.at(i));
  return r;
}

struct Problem {
  Case c;
  std::vector<double> dout, dfinal;
};

// loss = sum(dO . o) + sum(dS . S_final); *size gets the sum of the terms' magnitudes, which scales the rounding
// error of the loss (the terms cancel, so |loss| alone understates it).
double loss(Problem& pr, double* size) {
  Oracle o = run_oracle(pr.c);
  double l = 0, m = 0;
  for (int64_t i = 0; i < o.out.numel(); ++i) {
    l += pr.dout[i] * o.out.at(i);
    m += std::fabs(pr.dout[i] * o.out.at(i));
  }
  for (int64_t i = 0; i < o.final_state.numel(); ++i) {
    l += pr.dfinal[i] * o.final_state.at(i);
    m += std::fabs(pr.dfinal[i] * o.final_state.at(i));
  }
  *size = m;
  return l;
}

void expect_gradients_match(CaseSpec s) {
  const uint64_t seed = run_seed();
  SCOPED_TRACE("case " + s.name + " seed " + std::to_string(seed) + " (replay: KDA_SEED=" + std::to_string(seed) + ")");
  s.in_dtype = s.g_dtype = s.beta_dtype = KDA_DTYPE_FLOAT64;
  s.want_final = true;
  Problem pr{make_case(s, seed), {}, {}};
  pr.c.A_log = to_f64(pr.c.A_log);
  pr.c.dt_bias = to_f64(pr.c.dt_bias);
  pr.c.h0 = to_f64(pr.c.h0);
  std::mt19937_64 rng(seed + 11);
  std::normal_distribution<double> normal(0.0, 1.0);
  const CaseSpec& cs = pr.c.spec;
  pr.dout.resize(static_cast<size_t>(cs.B * cs.T * cs.HV * cs.V));
  for (double& x : pr.dout) x = normal(rng);
  pr.dfinal.resize(static_cast<size_t>(pr.c.N * cs.HV * cs.V * cs.K));
  for (double& x : pr.dfinal) x = normal(rng);

  // Analytic gradients.
  Outputs outs = make_outputs(pr.c, KDA_DTYPE_FLOAT64, KDA_DTYPE_FLOAT64);
  kda_forward_args_t a = host_args(pr.c, outs, KDA_BACKEND_REFERENCE);
  ForwardParams p;
  const Status st = validate_forward(&a, &p);
  ASSERT_TRUE(st.ok()) << st.message;
  reference::Gradients g;
  ASSERT_TRUE(reference::backward(p, pr.dout.data(), pr.dfinal.data(), &g).ok());

  struct Probe {
    const char* name;
    HostTensor* x;
    const std::vector<double>* grad;
  };
  std::vector<Probe> probes = {{"q", &pr.c.q, &g.dq},   {"k", &pr.c.k, &g.dk},       {"v", &pr.c.v, &g.dv},
                               {"g", &pr.c.g, &g.dg},   {"beta", &pr.c.beta, &g.dbeta}};
  if (pr.c.A_log.present()) probes.push_back({"A_log", &pr.c.A_log, &g.dA_log});
  if (pr.c.dt_bias.present()) probes.push_back({"dt_bias", &pr.c.dt_bias, &g.ddt_bias});
  if (pr.c.h0.present()) probes.push_back({"h0", &pr.c.h0, &g.dh0});
  for (const Probe& pb : probes) {
    ASSERT_EQ(static_cast<int64_t>(pb.grad->size()), pb.x->numel()) << pb.name;
    double rms = 0;
    for (double d : *pb.grad) rms += d * d;
    rms = std::sqrt(rms / pb.grad->size());
    std::uniform_int_distribution<int64_t> pick(0, pb.x->numel() - 1);
    for (int trial = 0; trial < 6; ++trial) {
      const int64_t i = pick(rng);
      const double x0 = pb.x->at(i), h = 1e-6 * std::max(1.0, std::fabs(x0));
      double sp = 0, sm = 0;
      pb.x->set(i, x0 + h);
      const double lp = loss(pr, &sp);
      pb.x->set(i, x0 - h);
      const double lm = loss(pr, &sm);
      pb.x->set(i, x0);
      const double fd = (lp - lm) / (2 * h), an = (*pb.grad)[i];
      // Central differences in float64 err by the rounding of the two losses over 2h (a few ulps of the size of
      // the loss's sum, here allowed 50) plus truncation ~h^2; 1e-5 of the gradient's scale on top is far below
      // any real mistake. (|loss| instead of the sum's size let cancelling sums fail at 1.5x: seed
      // 4342364094234224888, dt_bias.)
      const double rounding = 50 * 2.2e-16 * (sp + sm) / (2 * h);
      EXPECT_NEAR(an, fd, 1e-5 * (std::fabs(fd) + rms) + rounding) << pb.name << "[" << i << "]";
    }
  }
}

CaseSpec tiny(const std::string& name) {
  CaseSpec s;
  s.name = name;
  s.B = 1;
  s.T = 9;
  s.H = 1;
  s.HV = 2;
  s.K = 16;
  s.V = 16;
  return s;
}

// sigmoid'(z), the bounded gate's and beta logits' derivative, keeps its relative accuracy where the sigmoid
// saturates. The old form s (1 - s) lost it to the cancellation in 1 - s (fp32: 7% at z = 14, 0 from z ~ 17, while
// sigmoid'(17) = 4e-8 is far from fp32's underflow), which the backward-full verifier's saturated-gate probe caught in
// the CUDA backward's dg, dA_log and ddt_bias.
TEST(GateDerivative, SigmoidGradKeepsRelativeAccuracyWhenSaturated) {
  for (double z = -60.0; z <= 60.0; z += 0.125) {
    const long double e = std::exp(-std::fabs(static_cast<long double>(z)));
    const long double exact = e / ((1 + e) * (1 + e));
    const double f32 = sigmoid_grad<float>(static_cast<float>(z)), f64 = sigmoid_grad<double>(z);
    EXPECT_NEAR(f32 / static_cast<double>(exact), 1.0, 1e-6) << "fp32, z = " << z;
    EXPECT_NEAR(f64 / static_cast<double>(exact), 1.0, 1e-14) << "fp64, z = " << z;
  }
}

TEST(ReferenceBackward, BoundedGate) { expect_gradients_match(tiny("bounded")); }

TEST(ReferenceBackward, BoundedWithoutALogNoNorm) {
  CaseSpec s = tiny("bounded_no_A_log_no_norm");
  s.has_A_log = false;
  s.l2norm = false;
  s.recipe.qkv_std = 0.2;
  expect_gradients_match(s);
}

TEST(ReferenceBackward, SoftplusGateNegativeEigenvalues) {
  CaseSpec s = tiny("softplus_neg_eig");
  s.gate = KDA_GATE_SOFTPLUS;
  s.neg_eigval = true;
  expect_gradients_match(s);
}

TEST(ReferenceBackward, LogDecayGateBetaProbabilitiesKFirstState) {
  CaseSpec s = tiny("log_decay_beta_probs_k_first");
  s.gate = KDA_GATE_LOG_DECAY;
  s.beta_logits = false;
  s.v_first = false;
  expect_gradients_match(s);
}

TEST(ReferenceBackward, PackedLongerThanRecomputeSegment) {
  CaseSpec s = tiny("packed_across_segments");
  s.seqlens = {70, 0, 3, 131};
  s.H = 2;
  s.HV = 4;
  s.K = 16;
  s.V = 32;
  s.default_scale = false;
  s.scale = 0.7f;
  expect_gradients_match(s);
}

TEST(ReferenceBackward, NoInitialState) {
  CaseSpec s = tiny("no_h0");
  s.has_h0 = false;
  s.B = 2;
  expect_gradients_match(s);
}

}  // namespace
}  // namespace kda::testing

namespace kda::testing {
namespace {

// Backward through the C ABI (float64 gradients from the reference backend).
struct AbiGrads {
  HostTensor dq, dk, dv, dg, dbeta, dA_log, ddt_bias, dh0;
};

kda_status_t abi_backward(Case& c, const HostTensor& dout, const HostTensor& dfinal, kda_backend_t be, AbiGrads* g,
                          int32_t forward_saved = 0) {
  const kda_dtype_t gd = be == KDA_BACKEND_REFERENCE ? KDA_DTYPE_FLOAT64 : KDA_DTYPE_FLOAT32;
  auto like = [&](const HostTensor& x) { return x.present() ? make_tensor(gd, x.shape) : HostTensor{}; };
  g->dq = like(c.q); g->dk = like(c.k); g->dv = like(c.v); g->dg = like(c.g); g->dbeta = like(c.beta);
  g->dA_log = like(c.A_log); g->ddt_bias = like(c.dt_bias); g->dh0 = like(c.h0);
  Outputs unused = make_outputs(c, c.spec.in_dtype, KDA_DTYPE_FLOAT32);
  kda_backward_args_t a;
  kda_backward_args_init(&a);
  a.forward = host_args(c, unused, be);
  a.dout = dout.view();
  a.dfinal_state = dfinal.view();
  a.dq = g->dq.view(); a.dk = g->dk.view(); a.dv = g->dv.view(); a.dg = g->dg.view(); a.dbeta = g->dbeta.view();
  a.dA_log = g->dA_log.view(); a.ddt_bias = g->ddt_bias.view(); a.dh0 = g->dh0.view();
  a.forward_saved = forward_saved;
  return kda_backward(&a, nullptr, 0, nullptr);
}

// reference::backward called directly on c with the contiguous upstream gradients dout (and dfinal, if present): the
// float64 gradients and their mag_* sums that the ABI results are compared with.
void direct_reference(Case& c, const HostTensor& dout, const HostTensor& dfinal, reference::Gradients* g) {
  Outputs unused = make_outputs(c, KDA_DTYPE_FLOAT64, KDA_DTYPE_FLOAT64);
  kda_forward_args_t a = host_args(c, unused, KDA_BACKEND_REFERENCE);
  ForwardParams p;
  ASSERT_TRUE(validate_forward(&a, &p).ok());
  std::vector<double> d(static_cast<size_t>(dout.numel()));
  std::vector<double> f(static_cast<size_t>(dfinal.present() ? dfinal.numel() : 0));
  for (size_t i = 0; i < d.size(); ++i) d[i] = dout.at(static_cast<int64_t>(i));
  for (size_t i = 0; i < f.size(); ++i) f[i] = dfinal.at(static_cast<int64_t>(i));
  ASSERT_TRUE(reference::backward(p, d.data(), f.empty() ? nullptr : f.data(), g).ok());
}

// x (the CPU backend's fp32 gradient) against r (the reference's float64 one): within one fp32 rounding (2^-24 |r|)
// plus float64-level differences: 1e-12 of the size of the sum behind the element (mag, the reference's mag_* where
// it has one: dg, dbeta, ddt_bias and dA_log cancel far below their terms for dead channels), else of the tensor's
// RMS. That is what the chunked float64 core (src/cpu/backward_cpu.cpp) rounded once to fp32 must meet.
void expect_fp32_rounding_of(const HostTensor& x, const std::vector<double>& r, const char* name,
                             const std::vector<double>* mag = nullptr) {
  ASSERT_EQ(x.dtype, KDA_DTYPE_FLOAT32) << name;
  ASSERT_EQ(x.numel(), static_cast<int64_t>(r.size())) << name;
  double ss = 0;
  for (double e : r) ss += e * e;
  const double rms = r.empty() ? 0.0 : std::sqrt(ss / static_cast<double>(r.size()));
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double size = mag ? (*mag)[static_cast<size_t>(i)] : rms;
    // 2^-149: half of fp32's smallest subnormal spacing, where a gradient rounds into the subnormal range.
    ASSERT_LE(std::fabs(x.at(i) - r[i]), std::ldexp(std::fabs(r[i]), -24) + 1e-12 * size + std::ldexp(1.0, -149))
        << name << "[" << i << "]";
  }
}

// The C ABI's reference backward returns exactly the gradients of reference::backward, written through the
// tensors' strides and dtypes, and the CPU backend the same values to fp32 rounding (its chunked core).
TEST(BackwardAbi, ReferenceAndCpuMatchDirectCall) {
  CaseSpec s;
  s.name = "abi";
  s.T = 40;
  s.H = 1;
  s.HV = 2;
  s.K = s.V = 32;
  s.seqlens = {25, 0, 15};
  const uint64_t seed = run_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Case c = make_case(s, seed);
  std::mt19937_64 rng(seed + 5);
  std::normal_distribution<double> normal(0.0, 1.0);
  HostTensor dout = make_tensor(KDA_DTYPE_FLOAT32, {c.spec.B, c.spec.T, s.HV, s.V});
  for (int64_t i = 0; i < dout.numel(); ++i) dout.set(i, normal(rng));
  HostTensor dfinal = make_tensor(KDA_DTYPE_FLOAT32, c.h0.shape);
  for (int64_t i = 0; i < dfinal.numel(); ++i) dfinal.set(i, normal(rng));
  AbiGrads abi;
  ASSERT_EQ(abi_backward(c, dout, dfinal, KDA_BACKEND_REFERENCE, &abi), KDA_STATUS_SUCCESS) << kda_last_error();

  reference::Gradients g;
  direct_reference(c, dout, dfinal, &g);
  if (HasFatalFailure()) return;
  auto same = [](const HostTensor& x, const std::vector<double>& r, const char* name) {
    ASSERT_EQ(x.numel(), static_cast<int64_t>(r.size())) << name;
    for (int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(x.at(i), r[i]) << name << "[" << i << "]";
  };
  same(abi.dq, g.dq, "dq");
  same(abi.dk, g.dk, "dk");
  same(abi.dv, g.dv, "dv");
  same(abi.dg, g.dg, "dg");
  same(abi.dbeta, g.dbeta, "dbeta");
  same(abi.dA_log, g.dA_log, "dA_log");
  same(abi.ddt_bias, g.ddt_bias, "ddt_bias");
  same(abi.dh0, g.dh0, "dh0");

  // The CPU backend: its chunked float64 core around the same loading and chain rules.
  AbiGrads cpu;
  ASSERT_EQ(abi_backward(c, dout, dfinal, KDA_BACKEND_CPU, &cpu), KDA_STATUS_SUCCESS) << kda_last_error();
  auto rounded = [](const HostTensor& x, const std::vector<double>& r, const char* name) {
    expect_fp32_rounding_of(x, r, name);
  };
  rounded(cpu.dq, g.dq, "dq");
  rounded(cpu.dk, g.dk, "dk");
  rounded(cpu.dv, g.dv, "dv");
  rounded(cpu.dg, g.dg, "dg");
  rounded(cpu.dbeta, g.dbeta, "dbeta");
  rounded(cpu.dA_log, g.dA_log, "dA_log");
  rounded(cpu.ddt_bias, g.ddt_bias, "ddt_bias");
  rounded(cpu.dh0, g.dh0, "dh0");
}

// The CPU backend's chunked core against the reference backend on every hostile case of the correctness suite:
// single-token 1e4-nat decays and softplus gates past 1000 bits per chunk (the core's pairwise form), repeated and
// near-identical keys, beta = 2, packed layouts with empty and length-1 sequences, both state layouts.
class CpuChunkedBackward : public ::testing::TestWithParam<CaseSpec> {};
TEST_P(CpuChunkedBackward, MatchesTheReferenceToFp32Rounding) {
  const CaseSpec& s = GetParam();
  const uint64_t seed = run_seed();
  SCOPED_TRACE("case " + s.name + " seed " + std::to_string(seed) + " (replay: KDA_SEED=" + std::to_string(seed) + ")");
  Case c = make_case(s, seed);
  std::mt19937_64 rng(seed + 7);
  std::normal_distribution<double> normal(0.0, 1.0);
  HostTensor dout = make_tensor(KDA_DTYPE_FLOAT32, {c.spec.B, c.spec.T, s.HV, s.V});
  for (int64_t i = 0; i < dout.numel(); ++i) dout.set(i, normal(rng));
  HostTensor dfinal;
  if (s.want_final) {
    const int64_t N = c.spec.seqlens.empty() ? c.spec.B : static_cast<int64_t>(c.spec.seqlens.size());
    dfinal = make_tensor(KDA_DTYPE_FLOAT32, {N, s.HV, s.v_first ? s.V : s.K, s.v_first ? s.K : s.V});
    for (int64_t i = 0; i < dfinal.numel(); ++i) dfinal.set(i, 0.1 * normal(rng));
  }
  AbiGrads cpu;
  ASSERT_EQ(abi_backward(c, dout, dfinal, KDA_BACKEND_CPU, &cpu), KDA_STATUS_SUCCESS) << kda_last_error();
  // The reference directly, for its mag_* sums, on the same (contiguous) upstream gradients.
  reference::Gradients g;
  direct_reference(c, dout, dfinal, &g);
  if (HasFatalFailure()) return;
  expect_fp32_rounding_of(cpu.dq, g.dq, "dq");
  expect_fp32_rounding_of(cpu.dk, g.dk, "dk");
  expect_fp32_rounding_of(cpu.dv, g.dv, "dv");
  expect_fp32_rounding_of(cpu.dg, g.dg, "dg", &g.mag_dg);
  expect_fp32_rounding_of(cpu.dbeta, g.dbeta, "dbeta", &g.mag_dbeta);
  if (!g.dA_log.empty()) expect_fp32_rounding_of(cpu.dA_log, g.dA_log, "dA_log", &g.mag_dA_log);
  if (!g.ddt_bias.empty()) expect_fp32_rounding_of(cpu.ddt_bias, g.ddt_bias, "ddt_bias", &g.mag_ddt_bias);
  if (!g.dh0.empty()) expect_fp32_rounding_of(cpu.dh0, g.dh0, "dh0");
}
INSTANTIATE_TEST_SUITE_P(Cases, CpuChunkedBackward, ::testing::ValuesIn(correctness_cases()),
                         [](const ::testing::TestParamInfo<CaseSpec>& i) { return i.param.name; });

TEST(BackwardAbi, MissingGradientTensorsAreNamed) {
  CaseSpec s;
  s.T = 8;
  Case c = make_case(s, 2);
  HostTensor dout = make_tensor(KDA_DTYPE_FLOAT32, {c.spec.B, c.spec.T, s.HV, s.V});
  AbiGrads g;
  Outputs unused = make_outputs(c, s.in_dtype, KDA_DTYPE_FLOAT32);
  kda_backward_args_t a;
  kda_backward_args_init(&a);
  a.forward = host_args(c, unused, KDA_BACKEND_REFERENCE);
  a.dout = dout.view();
  EXPECT_EQ(kda_backward(&a, nullptr, 0, nullptr), KDA_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kda_last_error()).find("dq: required"), std::string::npos) << kda_last_error();
}

// forward_saved (skip the recompute) is the chunked CUDA backward's alone; anything else is refused by name.
TEST(BackwardAbi, ForwardSavedIsNamed) {
  CaseSpec s;
  s.T = 8;
  Case c = make_case(s, 2);
  HostTensor dout = make_tensor(KDA_DTYPE_FLOAT32, {c.spec.B, c.spec.T, s.HV, s.V});
  AbiGrads g;
  for (const int32_t saved : {1, 3}) {
    EXPECT_EQ(abi_backward(c, dout, HostTensor{}, KDA_BACKEND_CPU, &g, saved),
              saved == 1 ? KDA_STATUS_NOT_SUPPORTED : KDA_STATUS_INVALID_ARGUMENT);
    EXPECT_NE(std::string(kda_last_error()).find("forward_saved:"), std::string::npos) << kda_last_error();
  }
}

}  // namespace
}  // namespace kda::testing

namespace kda::testing {
namespace {

// compare_grad has teeth: the reference's own gradients rounded to fp32 pass, and the same with one token's dg
// contribution dropped (that token's row zeroed), with dbeta of one token off by 1% of the sum's size, or with every
// dq element off by 2^-9 relative, fail.
TEST(GradientRule, RejectsWrongGradients) {
  CaseSpec s;
  s.name = "grad_rule";
  s.T = 130;
  s.H = 1;
  s.HV = 2;
  s.K = s.V = 32;
  s.gate = KDA_GATE_SOFTPLUS;
  const uint64_t seed = run_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Case c = make_case(s, seed);
  Outputs unused = make_outputs(c, KDA_DTYPE_FLOAT64, KDA_DTYPE_FLOAT64);
  kda_forward_args_t a = host_args(c, unused, KDA_BACKEND_REFERENCE);
  ForwardParams p;
  ASSERT_TRUE(validate_forward(&a, &p).ok());
  std::mt19937_64 rng(seed + 3);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> dout(static_cast<size_t>(s.T * s.HV * s.V));
  for (double& x : dout) x = normal(rng);
  reference::Gradients g;
  ASSERT_TRUE(reference::backward<double>(p, dout.data(), nullptr, &g).ok());
  const Tolerance tol = tolerance_for(KDA_DTYPE_FLOAT32, ComputeClass::kFp32, s.T);
  auto as_f32 = [](const std::vector<double>& v, std::vector<int64_t> shape) {
    HostTensor t = make_tensor(KDA_DTYPE_FLOAT32, std::move(shape));
    for (int64_t i = 0; i < t.numel(); ++i) t.set(i, v[i]);
    return t;
  };
  const GradLayout dg_layout{s.HV, s.K, 64};
  HostTensor dg = as_f32(g.dg, {1, s.T, s.HV, s.K});
  EXPECT_TRUE(compare_grad(dg, g.dg, &g.mag_dg, tol, dg_layout).pass);
  // Token 77's contribution to dg dropped (both value heads).
  HostTensor dg_bad = dg;
  for (int64_t e = 0; e < s.HV * s.K; ++e) dg_bad.set(77 * s.HV * s.K + e, 0.0);
  const ErrorStats bad = compare_grad(dg_bad, g.dg, &g.mag_dg, tol, dg_layout);
  EXPECT_FALSE(bad.pass) << bad.summary();

  const GradLayout b_layout{s.HV, 1, 64};
  HostTensor db = as_f32(g.dbeta, {1, s.T, s.HV});
  EXPECT_TRUE(compare_grad(db, g.dbeta, &g.mag_dbeta, tol, b_layout).pass);
  HostTensor db_bad = db;
  db_bad.set(40, db.at(40) + 0.01 * g.mag_dbeta[40]);
  EXPECT_FALSE(compare_grad(db_bad, g.dbeta, &g.mag_dbeta, tol, b_layout).pass);

  const GradLayout q_layout{s.H, s.K, 64};
  HostTensor dq = as_f32(g.dq, {1, s.T, s.H, s.K});
  EXPECT_TRUE(compare_grad(dq, g.dq, nullptr, tol, q_layout).pass);
  HostTensor dq_bad = dq;
  for (int64_t i = 0; i < dq.numel(); ++i) dq_bad.set(i, g.dq[i] * (1 + std::ldexp(1.0, -9)));
  EXPECT_FALSE(compare_grad(dq_bad, g.dq, nullptr, tol, q_layout).pass);
}

// Gradients far below fp32's range (a bounded gate saturated ~150 nats deep: dg ~ 1e-66 in float64) are 0 in an fp32
// tensor, and the rule accepts that; an error above the absolute allowance (1e-30) on the same tiny references does
// not pass.
TEST(GradientRule, ValuesBelowTheAbsoluteFloorAreNotJudged) {
  const int64_t n = 4 * 64;
  std::vector<double> ref(n), mag(n);
  for (int64_t i = 0; i < n; ++i) {
    ref[i] = (i % 3 == 0 ? -1e-66 : 3e-70) * (1 + i);
    mag[i] = 4 * std::fabs(ref[i]);
  }
  const Tolerance tol = tolerance_for(KDA_DTYPE_FLOAT32, ComputeClass::kFp32, 64);
  const GradLayout layout{1, 64, 64};
  HostTensor zero = make_tensor(KDA_DTYPE_FLOAT32, {1, 4, 1, 64});
  for (int64_t i = 0; i < n; ++i) zero.set(i, 0.0);
  const ErrorStats ok = compare_grad(zero, ref, &mag, tol, layout);
  EXPECT_TRUE(ok.pass) << ok.summary();
  HostTensor off = zero;
  off.set(17, 1e-20);
  const ErrorStats bad = compare_grad(off, ref, &mag, tol, layout);
  EXPECT_FALSE(bad.pass) << bad.summary();
}

}  // namespace
}  // namespace kda::testing
