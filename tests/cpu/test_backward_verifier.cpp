// test_backward_verifier.cpp: the backward verifier has teeth: the CPU backward passes backward-quick, and
// deliberately wrong backward variants built around it (one gradient corrupted the way a fast kernel can get it
// wrong) fail it, under the loosest (tensor-core) class unless stated. The outside-implementation protocol's
// "not provided" path is checked too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>

#include "common/host_access.h"
#include "common/verify.h"

namespace kda::testing {
namespace {

kda_status_t cpu_backward(Case& c, const Upstream& up, Grads& g) { return run_backward_host(c, up, KDA_BACKEND_CPU, &g); }

Implementation variant(const std::string& name, ComputeClass cls,
                       std::function<kda_status_t(Case&, const Upstream&, Grads&)> backward) {
  Implementation impl;
  impl.name = name;
  impl.backward_cls = cls;
  impl.backward = std::move(backward);
  return impl;
}

// Runs backward-quick; returns the names of the cases impl failed (printed with the run seed).
std::vector<std::string> failures(const Implementation& impl) {
  const uint64_t seed = run_seed();
  std::vector<std::string> failed;
  for (const BackwardCase& bc : verify_backward_suite("backward-quick", seed)) {
    const VerifyResult r = verify_backward_case(bc, impl, seed ^ std::hash<std::string>{}(bc.spec.name));
    if (!r.pass) failed.push_back(r.name);
  }
  std::string list;
  for (const std::string& n : failed) list += " " + n;
  std::printf("  %-36s seed %llu: failed %zu cases:%s\n", impl.name.c_str(), static_cast<unsigned long long>(seed),
              failed.size(), list.c_str());
  return failed;
}

void expect_rejected(const Implementation& impl, const std::string& must_catch) {
  SCOPED_TRACE(impl.name + " seed " + std::to_string(run_seed()) + " (replay: KDA_SEED)");
  const std::vector<std::string> failed = failures(impl);
  EXPECT_FALSE(failed.empty()) << impl.name << " passed every case of backward-quick";
  EXPECT_NE(std::find(failed.begin(), failed.end(), must_catch), failed.end())
      << impl.name << " was not caught by " << must_catch;
}

// The sequences of a case: (batch, first token, length).
struct Span {
  int64_t batch, start, length;
};
std::vector<Span> spans(const Case& c) {
  std::vector<Span> v;
  if (c.cu_seqlens.present()) {
    for (int64_t n = 0; n + 1 < c.cu_seqlens.numel(); ++n) {
      const int64_t a = static_cast<int64_t>(c.cu_seqlens.at(n)), b = static_cast<int64_t>(c.cu_seqlens.at(n + 1));
      v.push_back({0, a, b - a});
    }
  } else {
    for (int64_t b = 0; b < c.spec.B; ++b) v.push_back({b, 0, c.spec.T});
  }
  return v;
}

TEST(BackwardVerifier, CpuBackendPassesBackwardQuick) {
  const Implementation cpu = implementation_by_name("cpu");  // the fp32 class, the tightest bounds
  ASSERT_EQ(cpu.backward_cls, ComputeClass::kFp32);
  EXPECT_TRUE(failures(cpu).empty());
}

// dg with one token's contribution dropped: the middle token of the longest sequence, every value head. Under the
// tensor-core class the standard recipe's weak decay does not always show it (there dg's sums cancel far below
// their size, mag_dg, and 2^-6 of mag hides one token on some seeds); the strongly decaying family always does.
TEST(BackwardVerifier, RejectsDgWithOneTokenDropped) {
  expect_rejected(variant("dg_one_token_dropped", ComputeClass::kTensorCore,
                          [](Case& c, const Upstream& up, Grads& g) {
                            const kda_status_t st = cpu_backward(c, up, g);
                            Span longest{0, 0, 0};
                            for (const Span& s : spans(c))
                              if (s.length > longest.length) longest = s;
                            const int64_t t = longest.batch * c.spec.T + longest.start + longest.length / 2;
                            const int64_t row = int64_t{c.spec.HV} * c.spec.K;
                            for (int64_t e = 0; e < row; ++e) g.dg.set(t * row + e, 0.0);
                            return st;
                          }),
                  "bwd_every_channel_0.5_to_1.2_nats_h2");
}

// dbeta of one token off by a fraction of its magnitude sum (mag_dbeta, the size of the sum behind it).
Implementation dbeta_off(const std::string& name, ComputeClass cls, double fraction) {
  return variant(name, cls, [fraction](Case& c, const Upstream& up, Grads& g) {
    const kda_status_t st = cpu_backward(c, up, g);
    const reference::Gradients ref = backward_oracle(c, up);
    const int64_t i = g.dbeta.numel() / 2;
    g.dbeta.set(i, g.dbeta.at(i) + fraction * ref.mag_dbeta[static_cast<size_t>(i)]);
    return st;
  });
}

// 1% of the sum is caught by the fp32 class of our backends (2^-10 of the sum per element); the tensor-core class
// resolves 2^-6 = 1.6% of it, so there the same wrong variant is probed with 4%.
TEST(BackwardVerifier, RejectsDbetaOffByOnePercentOfItsSumUnderFp32Class) {
  expect_rejected(dbeta_off("dbeta_one_token_off_1pct_fp32_class", ComputeClass::kFp32, 0.01), "bwd_standard_recipe_h2");
}
TEST(BackwardVerifier, RejectsDbetaOffByFourPercentOfItsSum) {
  expect_rejected(dbeta_off("dbeta_one_token_off_4pct", ComputeClass::kTensorCore, 0.04), "bwd_standard_recipe_h2");
}

// dh0 with the state decay of the last chunk of the reverse pass (the first 64 tokens of each sequence) missing:
// dh0 is taken from a backward whose gates decay nothing on those tokens; every other gradient is correct. Caught
// where the gates decay (under the standard recipe's weak decay, 64 tokens decay h0 by well under 2^-9).
TEST(BackwardVerifier, RejectsDh0WithoutTheLastChunksDecay) {
  expect_rejected(variant("dh0_last_chunk_decay_missing", ComputeClass::kTensorCore,
                          [](Case& c, const Upstream& up, Grads& g) {
                            kda_status_t st = cpu_backward(c, up, g);
                            if (st != KDA_STATUS_SUCCESS || !g.dh0.present()) return st;
                            Case nodecay = c;
                            // log-decay gate: 0; softplus and bounded gates: a logit far below 0 (decay 1).
                            const double none = c.spec.gate == KDA_GATE_LOG_DECAY ? 0.0 : -6e4;
                            const int64_t row = int64_t{c.spec.HV} * c.spec.K;
                            for (const Span& s : spans(c))
                              for (int64_t i = 0; i < std::min<int64_t>(s.length, 64); ++i)
                                for (int64_t e = 0; e < row; ++e)
                                  nodecay.g.set((s.batch * c.spec.T + s.start + i) * row + e, none);
                            Grads wrong = make_grads(c, false);
                            st = cpu_backward(nodecay, up, wrong);
                            for (int64_t i = 0; i < g.dh0.numel(); ++i) g.dh0.set(i, wrong.dh0.at(i));
                            return st;
                          }),
                  "bwd_every_channel_0.5_to_1.2_nats_h2");
}

// dk without the L2-norm backward: the gradient with respect to the normalized keys, returned as dk.
TEST(BackwardVerifier, RejectsDkWithoutTheL2NormBackward) {
  expect_rejected(variant("dk_without_l2norm_backward", ComputeClass::kTensorCore,
                          [](Case& c, const Upstream& up, Grads& g) {
                            kda_status_t st = cpu_backward(c, up, g);
                            if (st != KDA_STATUS_SUCCESS || !c.spec.l2norm) return st;
                            Case pre = c;  // q and k normalized up front, the kernel's norm off
                            pre.spec.l2norm = false;
                            const int64_t K = c.spec.K;
                            for (HostTensor* x : {&pre.q, &pre.k})
                              for (int64_t r = 0; r < x->numel() / K; ++r) {
                                double ss = 0;
                                for (int64_t d = 0; d < K; ++d) ss += x->at(r * K + d) * x->at(r * K + d);
                                const double inv = 1.0 / std::sqrt(ss + 1e-6);
                                for (int64_t d = 0; d < K; ++d) x->set(r * K + d, x->at(r * K + d) * inv);
                              }
                            Grads wrong = make_grads(c, false);
                            st = cpu_backward(pre, up, wrong);
                            for (int64_t i = 0; i < g.dk.numel(); ++i) g.dk.set(i, wrong.dk.at(i));
                            return st;
                          }),
                  "bwd_standard_recipe_h2");
}

// An outside implementation that returns no dA_log / ddt_bias: reported as not provided, never as passed; one
// that returns no dg fails.
TEST(BackwardVerifier, MissingGradientsAreReportedNotPassed) {
  const uint64_t seed = run_seed();
  BackwardCase bc = verify_backward_suite("backward-quick", seed).front();
  auto dropping = [](std::vector<std::string> names) {
    return variant("drops", ComputeClass::kTensorCore, [names](Case& c, const Upstream& up, Grads& g) {
      const kda_status_t st = cpu_backward(c, up, g);
      g.missing = names;
      return st;
    });
  };
  VerifyResult r = verify_backward_case(bc, dropping({"dA_log", "ddt_bias"}), seed);
  EXPECT_TRUE(r.pass) << r.error;
  EXPECT_NE(r.error.find("not provided: dA_log ddt_bias"), std::string::npos) << r.error;
  int not_provided = 0;
  for (const GradVerdict& v : r.grads) not_provided += !v.provided;
  EXPECT_EQ(not_provided, 2);
  EXPECT_NE(verify_json({r}, "backward-quick", "drops", seed, "test").find("\"dA_log\": {\"provided\": false}"),
            std::string::npos);
  r = verify_backward_case(bc, dropping({"dg"}), seed);
  EXPECT_FALSE(r.pass);
}

// A baseline that is worse than the implementation under test is no reason to fail; a better one is.
TEST(BackwardVerifier, BaselineComparison) {
  const uint64_t seed = run_seed();
  BackwardCase bc = verify_backward_suite("backward-quick", seed).front();
  bc.grads_in_input_dtype = false;
  const Implementation cpu = implementation_by_name("cpu");
  Implementation bf16 = cpu;  // the same backward, rounded to bf16 gradients
  bf16.backward_grads_in_input_dtype = true;
  bf16.backward_cls = ComputeClass::kTensorCore;
  VerifyResult r = verify_backward_case(bc, cpu, seed, &bf16);
  EXPECT_TRUE(r.pass) << r.error;
  r = verify_backward_case(bc, bf16, seed, &cpu);
  EXPECT_FALSE(r.pass);
  EXPECT_NE(r.error.find("worse than the baseline"), std::string::npos) << r.error;
}

// reference::backward's key_scale is the backward of the case whose keys are scaled: checked where the keys are inputs
// (no in-kernel norm), held to 8 bits so that k (1 + 2^-12) is exact in the fp32 inputs.
TEST(BackwardVerifier, OracleKeyScaleIsTheScaledKeysBackward) {
  const uint64_t seed = run_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  CaseSpec s;
  s.T = 80;
  s.H = 1;
  s.HV = 2;
  s.in_dtype = s.g_dtype = s.beta_dtype = KDA_DTYPE_FLOAT32;
  s.l2norm = false;
  Case c = make_case(s, seed);
  for (int64_t i = 0; i < c.k.numel(); ++i) c.k.set(i, bf16_bits_to_float(float_to_bf16_bits(c.k.at(i) / 8)));
  const Upstream up = make_upstream(c, true, seed);
  const double f = 1 + std::ldexp(1.0, -12);
  Case scaled = c;
  for (int64_t i = 0; i < c.k.numel(); ++i) scaled.k.set(i, c.k.at(i) * f);
  const reference::Gradients a = backward_oracle(c, up, f), b = backward_oracle(scaled, up);
  Grads g = make_grads(c, false);
  const std::vector<GradItem> ia = grad_items(s, g, a), ib = grad_items(s, g, b);
  for (size_t k = 0; k < ia.size(); ++k) {
    double worst = 0, scale = 0;
    for (size_t i = 0; i < ia[k].ref->size(); ++i) {
      worst = std::max(worst, std::fabs((*ia[k].ref)[i] - (*ib[k].ref)[i]));
      scale = std::max(scale, std::fabs((*ib[k].ref)[i]));
    }
    EXPECT_LE(worst, 1e-12 * scale) << ia[k].name;
  }
}

// The key norm's rounding in the backward (verify.cpp, compare.h fit_key_norm): an implementation returning the
// oracle's gradients plus delta times their tangents (central differences of the oracle with every k_hat scaled by
// 1 +- 2^-20) passes under the fp32 class with delta recovered for delta within the limit, and fails past it or for
// an error of the same sizes with pseudo-random signs.
TEST(BackwardVerifier, KeyNormFitTakesOutOnlyAKeyScaleWithinTheLimit) {
  const uint64_t seed = run_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  BackwardCase bc{"stress", CaseSpec{}};
  bc.spec.name = "bwd_near_identical_keys_beta_at_2";
  bc.spec.T = 512;
  bc.spec.recipe.key_jitter = 1e-3;
  bc.spec.neg_eigval = true;
  bc.spec.recipe.beta_mean = 12;
  const double u = std::ldexp(1.0, -24), limit = key_norm_delta_limit(bc.spec.K);
  auto returning = [&](double delta, int kind) {
    return verify_backward_case(bc, variant("oracle_plus_key_scale", ComputeClass::kFp32,
                                            [delta, kind](Case& c, const Upstream& up, Grads& g) {
      const double h = std::ldexp(1.0, -20);
      const reference::Gradients r = backward_oracle(c, up), rp = backward_oracle(c, up, 1 + h),
                                 rm = backward_oracle(c, up, 1 - h);
      const std::vector<GradItem> items = grad_items(c.spec, g, r), ip = grad_items(c.spec, g, rp),
                                  im = grad_items(c.spec, g, rm);
      std::mt19937 sign(11);
      for (size_t k = 0; k < items.size(); ++k) {
        HostTensor& out = const_cast<HostTensor&>(*items[k].got);
        for (int64_t i = 0; i < out.numel(); ++i) {
          const double t = ((*ip[k].ref)[i] - (*im[k].ref)[i]) / (2 * h);
          out.set(i, (*items[k].ref)[i] + delta * t * (kind == 0 || (sign() & 1) ? 1.0 : -1.0));
        }
      }
      return KDA_STATUS_SUCCESS;
    }), seed);
  };
  const VerifyResult exact = returning(0, 0);
  EXPECT_TRUE(exact.pass) << verify_row(exact);
  EXPECT_LT(exact.key_norm_delta, 0) << "the plain bounds held: no fit";
  const VerifyResult within = returning(0.5 * limit, 0);
  std::printf("  %s\n", verify_row(within).c_str());
  EXPECT_TRUE(within.pass) << verify_row(within);
  EXPECT_NEAR(within.key_norm_delta, 0.5 * limit / u, 0.02 * limit / u) << "the fitted delta";
  const VerifyResult past = returning(2 * limit, 0);
  std::printf("  %s\n", verify_row(past).c_str());
  EXPECT_FALSE(past.pass) << verify_row(past);
  const VerifyResult other = returning(0.5 * limit, 1);
  std::printf("  %s\n", verify_row(other).c_str());
  EXPECT_FALSE(other.pass) << verify_row(other);
}

}  // namespace
}  // namespace kda::testing
