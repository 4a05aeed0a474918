// test_decode.cpp: decode against the state pool on the CPU: the float64 reference against an oracle built from
// the forward reference, the CPU backend against it on random and hostile cases (padding, 1-D and 2-D slot
// indices, num_accepted_tokens), untouched slots bitwise unchanged, and argument errors naming the argument.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "common/decode_cases.h"

namespace kda::testing {
namespace {

void expect_decode_matches(const DecodeSpec& s, kda_backend_t be) {
  const uint64_t seed = run_seed();
  SCOPED_TRACE("case " + s.name + " seed " + std::to_string(seed) + " (replay: KDA_SEED=" + std::to_string(seed) + ")");
  DecodeCase d = make_decode_case(s, seed);
  const DecodeOracle o = decode_oracle(d);
  HostTensor out = make_tensor(d.c.spec.in_dtype, {d.c.spec.B, d.c.spec.T, d.c.spec.HV, d.c.spec.V});
  for (int64_t i = 0; i < out.numel(); ++i) out.set(i, std::numeric_limits<double>::quiet_NaN());
  HostTensor pool = d.pool;
  kda_decode_args_t a = decode_host_args(d, out, pool, be);
  ASSERT_EQ(kda_decode(&a, nullptr, 0, nullptr), KDA_STATUS_SUCCESS) << kda_last_error();
  const DecodeVerdict v = judge_decode(d, o, out, pool, tolerance_for(d.c.spec.in_dtype, ComputeClass::kFp32));
  EXPECT_TRUE(v.pass) << v.summary();
}

class Decode : public ::testing::TestWithParam<DecodeSpec> {};

TEST_P(Decode, ReferenceMatchesForwardOracle) { expect_decode_matches(GetParam(), KDA_BACKEND_REFERENCE); }
TEST_P(Decode, CpuMatchesReference) { expect_decode_matches(GetParam(), KDA_BACKEND_CPU); }

INSTANTIATE_TEST_SUITE_P(Cases, Decode, ::testing::ValuesIn(decode_cases()),
                         [](const ::testing::TestParamInfo<DecodeSpec>& i) { return i.param.name; });

// The judge has teeth: a changed bit in an untouched slot, a written slot off by 1%, and an unwritten output
// each fail an otherwise correct result.
TEST(DecodeJudge, CatchesCorruption) {
  DecodeSpec s = decode_cases()[0];
  s.padding = 0.0;
  DecodeCase d = make_decode_case(s, run_seed());
  const DecodeOracle o = decode_oracle(d);
  HostTensor out = make_tensor(d.c.spec.in_dtype, {d.c.spec.B, d.c.spec.T, d.c.spec.HV, d.c.spec.V});
  HostTensor pool = d.pool;
  kda_decode_args_t a = decode_host_args(d, out, pool, KDA_BACKEND_CPU);
  ASSERT_EQ(kda_decode(&a, nullptr, 0, nullptr), KDA_STATUS_SUCCESS) << kda_last_error();
  const Tolerance tol = tolerance_for(d.c.spec.in_dtype, ComputeClass::kFp32);
  ASSERT_TRUE(judge_decode(d, o, out, pool, tol).pass);
  int64_t untouched = -1, written = -1;
  for (int64_t i = 0; i < pool.numel(); ++i) (o.written[i] ? written : untouched) = i;
  ASSERT_GE(untouched, 0);
  ASSERT_GE(written, 0);
  HostTensor p1 = pool;
  static_cast<uint32_t*>(p1.data())[untouched] ^= 1u;
  EXPECT_FALSE(judge_decode(d, o, out, p1, tol).pass);
  HostTensor p2 = pool;
  p2.set(written, p2.at(written) * 1.01 + std::copysign(1e-3, p2.at(written)));
  EXPECT_FALSE(judge_decode(d, o, out, p2, tol).pass);
  HostTensor o2 = out;
  o2.set(0, std::numeric_limits<double>::quiet_NaN());
  EXPECT_FALSE(judge_decode(d, o, o2, pool, tol).pass);
}

struct DecodeFixture {
  DecodeCase d;
  HostTensor out, pool;
  kda_decode_args_t a;
  explicit DecodeFixture(bool per_token = false) {
    DecodeSpec s = decode_cases()[0];
    s.per_token = per_token;
    s.io.T = per_token ? 2 : 1;
    d = make_decode_case(s, 5);
    out = make_tensor(d.c.spec.in_dtype, {d.c.spec.B, d.c.spec.T, d.c.spec.HV, d.c.spec.V});
    pool = d.pool;
    a = decode_host_args(d, out, pool, KDA_BACKEND_AUTO);
  }
};

void expect_decode_error(void (*mutate)(DecodeFixture&), const std::string& arg, const std::string& phrase,
                         bool per_token = false) {
  DecodeFixture f(per_token);
  mutate(f);
  const std::vector<uint8_t> before = f.pool.bytes;
  EXPECT_EQ(kda_decode(&f.a, nullptr, 0, nullptr), KDA_STATUS_INVALID_ARGUMENT);
  const std::string msg = kda_last_error();
  EXPECT_NE(msg.find(arg + ":"), std::string::npos) << msg;
  EXPECT_NE(msg.find(phrase), std::string::npos) << msg;
  EXPECT_EQ(f.pool.bytes, before) << "the pool was written by a failing call";
}

TEST(DecodeValidation, Errors) {
  expect_decode_error([](DecodeFixture& f) { f.a.state_pool = kda_tensor_none(); }, "state_pool", "required");
  expect_decode_error([](DecodeFixture& f) { f.a.state_pool.shape[2] = 8; }, "state_pool", "expected shape");
  expect_decode_error([](DecodeFixture& f) { f.a.state_pool.dtype = KDA_DTYPE_BFLOAT16; }, "state_pool",
                      "expected float32");
  expect_decode_error([](DecodeFixture& f) { f.a.state_indices.dtype = KDA_DTYPE_INT64; }, "state_indices",
                      "expected int32");
  expect_decode_error([](DecodeFixture& f) { f.a.state_indices.shape[0] = 2; }, "state_indices", "expected shape [N]");
  expect_decode_error([](DecodeFixture& f) { f.a.num_accepted_tokens = f.d.indices.view(); }, "num_accepted_tokens",
                      "needs 2-D state_indices");
  expect_decode_error([](DecodeFixture& f) { f.a.k.shape[1] = 3; }, "k", "expected shape");
  expect_decode_error([](DecodeFixture& f) { f.a.state_pool.device_type = KDA_DEVICE_CUDA; }, "state_pool",
                      "one device");
}

}  // namespace
}  // namespace kda::testing
