// test_checkpoints.cpp: prefix-cache state checkpoints. The reference's checkpoint j equals the final state of the
// reference run on the sequence's first offsets[j] tokens; the CPU backend's equal the reference's within the fp32
// state bounds; entries whose token count is negative or past the sequence are left untouched (bit for bit); and
// bad checkpoint arguments are refused with a message naming them.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>

#include "common/cases.h"
#include "common/compare.h"

namespace kda::testing {
namespace {

constexpr double kSentinel = 12345.0;

HostTensor make_checkpoints(const Case& c, int64_t n_ckpt, kda_dtype_t dtype) {
  const CaseSpec& s = c.spec;
  HostTensor t = make_tensor(dtype, s.v_first ? std::vector<int64_t>{c.N, n_ckpt, s.HV, s.V, s.K}
                                              : std::vector<int64_t>{c.N, n_ckpt, s.HV, s.K, s.V});
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, kSentinel);
  return t;
}

// Token count held by entry j of sequence n (as kda.h defines it).
int64_t count_of(const HostTensor& offsets, int64_t interval, int64_t n, int64_t n_ckpt, int64_t j) {
  return offsets.present() ? static_cast<int64_t>(offsets.at(n * n_ckpt + j)) : (j + 1) * interval;
}

std::vector<int64_t> lengths(const Case& c) {
  return c.spec.seqlens.empty() ? std::vector<int64_t>(static_cast<size_t>(c.N), c.spec.T) : c.spec.seqlens;
}

// Runs backend be with checkpoints; returns them.
HostTensor run_with_checkpoints(Case& c, const HostTensor& offsets, int32_t interval, int64_t n_ckpt,
                                kda_backend_t be, kda_dtype_t dtype) {
  HostTensor ck = make_checkpoints(c, n_ckpt, dtype);
  Outputs o = make_outputs(c, be == KDA_BACKEND_REFERENCE ? KDA_DTYPE_FLOAT64 : c.spec.in_dtype,
                           be == KDA_BACKEND_REFERENCE ? KDA_DTYPE_FLOAT64 : KDA_DTYPE_FLOAT32);
  kda_forward_args_t a = host_args(c, o, be);
  a.state_checkpoints = ck.view();
  a.checkpoint_offsets = offsets.view();
  a.checkpoint_interval = interval;
  EXPECT_EQ(kda_forward(&a, nullptr, 0, nullptr), KDA_STATUS_SUCCESS) << kda_last_error();
  return ck;
}

HostTensor random_offsets(const Case& c, int64_t n_ckpt, std::mt19937_64& rng, kda_dtype_t dtype) {
  HostTensor off = make_tensor(dtype, {c.N, n_ckpt});
  const std::vector<int64_t> lens = lengths(c);
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t j = 0; j < n_ckpt; ++j) {
      // 0, the full length, inside, past the end, negative.
      const int64_t len = lens[n];
      const int64_t choices[] = {0, len, std::uniform_int_distribution<int64_t>(0, std::max<int64_t>(len, 0))(rng),
                                 len + 5, -3};
      off.set(n * n_ckpt + j, static_cast<double>(choices[std::uniform_int_distribution<int>(0, 4)(rng)]));
    }
  return off;
}

TEST(Checkpoints, ReferenceEqualsPrefixFinalStates) {
  CaseSpec s;
  s.name = "ckpt_reference";
  s.H = 1;
  s.HV = 2;
  s.K = s.V = 16;
  s.seqlens = {5, 0, 9};
  s.in_dtype = s.g_dtype = s.beta_dtype = KDA_DTYPE_FLOAT32;
  const uint64_t seed = run_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Case c = make_case(s, seed);
  std::mt19937_64 rng(seed);
  const int64_t n_ckpt = 5;
  const HostTensor off = random_offsets(c, n_ckpt, rng, KDA_DTYPE_INT64);
  const HostTensor ck = run_with_checkpoints(c, off, 0, n_ckpt, KDA_BACKEND_REFERENCE, KDA_DTYPE_FLOAT64);
  const std::vector<int64_t> lens = lengths(c);
  const int64_t per = int64_t{s.HV} * s.V * s.K;
  int64_t start = 0;
  for (int64_t n = 0; n < c.N; ++n) {
    for (int64_t j = 0; j < n_ckpt; ++j) {
      const int64_t cnt = count_of(off, 0, n, n_ckpt, j);
      const int64_t base = (n * n_ckpt + j) * per;
      if (cnt < 0 || cnt > lens[n]) {
        for (int64_t i = 0; i < per; ++i) ASSERT_EQ(ck.at(base + i), kSentinel) << "entry " << j << " was written";
        continue;
      }
      // The prefix of cnt tokens as its own case, from the same h0.
      CaseSpec ps = s;
      ps.seqlens = {cnt};
      Case pc = make_case(ps, seed);
      auto copy_tokens = [&](HostTensor& dst, const HostTensor& src) {
        const int64_t row = src.numel() / src.shape[1];
        for (int64_t i = 0; i < cnt * row; ++i) dst.set(i, src.at(start * row + i));
      };
      copy_tokens(pc.q, c.q);
      copy_tokens(pc.k, c.k);
      copy_tokens(pc.v, c.v);
      copy_tokens(pc.g, c.g);
      copy_tokens(pc.beta, c.beta);
      pc.A_log = c.A_log;
      pc.dt_bias = c.dt_bias;
      for (int64_t i = 0; i < per; ++i) pc.h0.set(i, c.h0.at(n * per + i));
      const Oracle o = run_oracle(pc);
      for (int64_t i = 0; i < per; ++i) ASSERT_EQ(ck.at(base + i), o.final_state.at(i)) << "n " << n << " j " << j;
    }
    start += lens[n];
  }
}

struct CkptCase {
  std::string name;
  bool offsets;  // else interval
  bool v_first;
  kda_dtype_t offset_dtype;
};

class CpuCheckpoints : public ::testing::TestWithParam<CkptCase> {};

TEST_P(CpuCheckpoints, MatchReference) {
  const CkptCase& k = GetParam();
  CaseSpec s;
  s.name = k.name;
  s.H = 2;
  s.HV = 2;
  s.K = s.V = 64;
  s.seqlens = {150, 64, 0, 200, 1};
  s.v_first = k.v_first;
  const uint64_t seed = run_seed();
  SCOPED_TRACE("case " + k.name + " seed " + std::to_string(seed));
  Case c = make_case(s, seed);
  std::mt19937_64 rng(seed);
  const int64_t n_ckpt = 4;
  const int32_t interval = k.offsets ? 0 : 64;
  const HostTensor off = k.offsets ? random_offsets(c, n_ckpt, rng, k.offset_dtype) : HostTensor{};
  const HostTensor ref = run_with_checkpoints(c, off, interval, n_ckpt, KDA_BACKEND_REFERENCE, KDA_DTYPE_FLOAT64);
  const HostTensor got = run_with_checkpoints(c, off, interval, n_ckpt, KDA_BACKEND_CPU, KDA_DTYPE_FLOAT32);
  // Written entries by the final-state rule; the others must still hold the sentinel bits.
  const Tolerance tol = tolerance_for(s.in_dtype, ComputeClass::kFp32);
  const std::vector<int64_t> lens = lengths(c);
  const int64_t per = int64_t{s.HV} * s.V * s.K;
  HostTensor g = make_tensor(KDA_DTYPE_FLOAT32, {got.numel()});
  Oracle o;
  o.final_state = make_tensor(KDA_DTYPE_FLOAT64, {got.numel()});
  int64_t written = 0;
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t j = 0; j < n_ckpt; ++j) {
      const int64_t cnt = count_of(off, interval, n, n_ckpt, j);
      const bool w = cnt >= 0 && cnt <= lens[n];
      for (int64_t i = 0; i < per; ++i) {
        const int64_t e = (n * n_ckpt + j) * per + i;
        if (w) {
          g.set(e, got.at(e));
          o.final_state.set(e, ref.at(e));
        } else {
          ASSERT_EQ(got.at(e), kSentinel) << "entry n " << n << " j " << j << " was written";
          ASSERT_EQ(ref.at(e), kSentinel);
        }
      }
      written += w;
    }
  EXPECT_GT(written, 0);
  const ErrorStats es = compare_state(g, o, tol, int64_t{s.K} * s.V);
  EXPECT_TRUE(es.pass) << es.summary();
}

INSTANTIATE_TEST_SUITE_P(Layouts, CpuCheckpoints,
                         ::testing::Values(CkptCase{"every_64_tokens", false, true, KDA_DTYPE_INT32},
                                           CkptCase{"offsets_int32", true, true, KDA_DTYPE_INT32},
                                           CkptCase{"offsets_int64_k_first", true, false, KDA_DTYPE_INT64}),
                         [](const ::testing::TestParamInfo<CkptCase>& i) { return i.param.name; });

TEST(Checkpoints, BadArgumentsAreRefused) {
  CaseSpec s;
  s.seqlens = {10, 20};
  Case c = make_case(s, 3);
  Outputs o = make_outputs(c, s.in_dtype, KDA_DTYPE_FLOAT32);
  HostTensor ck = make_checkpoints(c, 2, KDA_DTYPE_FLOAT32);
  auto expect = [&](kda_forward_args_t a, const std::string& arg, const std::string& phrase) {
    EXPECT_EQ(kda_forward(&a, nullptr, 0, nullptr), KDA_STATUS_INVALID_ARGUMENT);
    const std::string m = kda_last_error();
    EXPECT_NE(m.find(arg + ":"), std::string::npos) << m;
    EXPECT_NE(m.find(phrase), std::string::npos) << m;
  };
  kda_forward_args_t a = host_args(c, o, KDA_BACKEND_CPU);
  a.state_checkpoints = ck.view();
  expect(a, "checkpoint_interval", "must be > 0");
  HostTensor off = make_tensor(KDA_DTYPE_INT32, {2, 3});
  a.checkpoint_offsets = off.view();
  expect(a, "checkpoint_offsets", "expected shape");
  kda_forward_args_t b = host_args(c, o, KDA_BACKEND_CPU);
  b.checkpoint_offsets = off.view();
  expect(b, "checkpoint_offsets", "without state_checkpoints");
  kda_forward_args_t d = host_args(c, o, KDA_BACKEND_CPU);
  HostTensor bad = make_tensor(KDA_DTYPE_FLOAT32, {2, 2, s.HV, s.K, s.K + 1});
  d.state_checkpoints = bad.view();
  d.checkpoint_interval = 8;
  expect(d, "state_checkpoints", "expected shape");
}

}  // namespace
}  // namespace kda::testing
