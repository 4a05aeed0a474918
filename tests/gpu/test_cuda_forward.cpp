// test_cuda_forward.cpp: the CUDA forward paths against the float64 reference: the same random and hostile
// cases as the CPU suite, full-size cases (8192 tokens, H = 64, the three input families, the unbounded
// softplus gate, the mixed packed layout), and behaviour probes: NaN-poisoned outputs, CUDA-graph capture then
// replay with new input values, identical bits from identical calls, a call after a different call.
// Skips itself where no GPU is present.
#include <gtest/gtest.h>

#include "common/cases.h"
#include "common/compare.h"
#include "common/device.h"
#include "common/suites.h"

namespace kda::testing {
namespace {

// Every GPU test skips (in SetUp, so the body never runs) where no CUDA device is present.
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  }
};

// Runs case c on the device with backend be (outputs poisoned first) and judges the result.
void expect_matches_reference(const CaseSpec& s, kda_backend_t be, ComputeClass cls) {
  const uint64_t seed = run_seed();
  SCOPED_TRACE("case " + s.name + " seed " + std::to_string(seed) + " (replay: KDA_SEED=" + std::to_string(seed) + ")");
  Case c = make_case(s, seed);
  Oracle o = run_oracle(c);
  Outputs outs = make_outputs(c, s.in_dtype, KDA_DTYPE_FLOAT32);
  DeviceProblem dp(c, outs, be);
  dp.poison_outputs();
  ASSERT_EQ(dp.run(), KDA_STATUS_SUCCESS) << kda_last_error();
  dp.download(outs);
  const Tolerance tol = tolerance_for(s.in_dtype, cls);
  const ErrorStats eo = compare_out(outs.out, o, tol);
  EXPECT_TRUE(eo.pass) << "out: " << eo.summary() << " [" << tol.describe() << "]";
  ::testing::Test::RecordProperty("out", eo.summary());
  if (s.want_final) {
    const ErrorStats es = compare_state(outs.final_state, o, tol, int64_t{s.K} * s.V);
    EXPECT_TRUE(es.pass) << "final_state: " << es.summary();
    ::testing::Test::RecordProperty("state", es.summary());
    std::printf("  %-44s out %s\n  %-44s state %s\n", s.name.c_str(), eo.summary().c_str(), "", es.summary().c_str());
  } else {
    std::printf("  %-44s out %s\n", s.name.c_str(), eo.summary().c_str());
  }
}

class CudaBehaviour : public GpuTest {};

// The generic path (token-recurrent, fp32 throughout) is held to the fp32 bounds; the chunked kernel (tf32
// tensor-core products) to the tensor-core bounds, on the cases it takes (it refuses the others with
// KDA_STATUS_NOT_SUPPORTED, which is checked against its documented support).
class CudaGeneric : public GpuTest, public ::testing::WithParamInterface<CaseSpec> {};
class CudaChunked : public GpuTest, public ::testing::WithParamInterface<CaseSpec> {};

TEST_P(CudaGeneric, MatchesReference) {
  expect_matches_reference(GetParam(), KDA_BACKEND_CUDA_GENERIC, ComputeClass::kFp32);
}
TEST_P(CudaChunked, MatchesReference) {
  const CaseSpec& s = GetParam();
  const bool documented = (s.K == 64 || s.K == 128) && s.V % 64 == 0 && s.in_dtype != KDA_DTYPE_FLOAT32;
  if (!documented) {
    // The workspace query validates and checks support without reading any data.
    Case c = make_case(s, 1);
    Outputs o = make_outputs(c, s.in_dtype, KDA_DTYPE_FLOAT32);
    size_t ws = 0;
    kda_forward_args_t a = host_args(c, o, KDA_BACKEND_CUDA_CHUNKED);
    for (kda_tensor_t* t : {&a.q, &a.k, &a.v, &a.g, &a.beta, &a.A_log, &a.dt_bias, &a.initial_state, &a.cu_seqlens,
                            &a.out, &a.final_state})
      if (t->ndim) t->device_type = KDA_DEVICE_CUDA;
    EXPECT_EQ(kda_forward_workspace_size(&a, &ws), KDA_STATUS_NOT_SUPPORTED) << "outside the documented support";
    GTEST_SKIP() << "outside KDA_BACKEND_CUDA_CHUNKED's support (refused as documented)";
  }
  expect_matches_reference(s, KDA_BACKEND_CUDA_CHUNKED, ComputeClass::kTensorCore);
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaGeneric, ::testing::ValuesIn(correctness_cases()),
                         [](const ::testing::TestParamInfo<CaseSpec>& i) { return i.param.name; });
std::string large_name(const ::testing::TestParamInfo<CaseSpec>& i) {
  std::string n = i.param.name;
  for (char& ch : n)
    if (ch == '.') ch = '_';
  return n;
}
INSTANTIATE_TEST_SUITE_P(Large, CudaGeneric, ::testing::ValuesIn(large_cases()), large_name);
INSTANTIATE_TEST_SUITE_P(Cases, CudaChunked, ::testing::ValuesIn(correctness_cases()),
                         [](const ::testing::TestParamInfo<CaseSpec>& i) { return i.param.name; });
INSTANTIATE_TEST_SUITE_P(Large, CudaChunked, ::testing::ValuesIn(large_cases()), large_name);

// AUTO on CUDA tensors runs a CUDA path and gives the generic path's answer.
TEST_F(CudaBehaviour, AutoDispatchesToCuda) {
  expect_matches_reference(correctness_case_base("auto_dispatch"), KDA_BACKEND_AUTO, ComputeClass::kFp32);
}

// A graph captured once and replayed after the inputs changed computes the new inputs' answer.
TEST_F(CudaBehaviour, GraphReplayWithNewInputs) {
  CaseSpec s = correctness_case_base("graph_replay");
  s.seqlens = {40, 0, 130, 1};
  const uint64_t seed = run_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Case first = make_case(s, seed);
  Outputs outs = make_outputs(first, s.in_dtype, KDA_DTYPE_FLOAT32);
  DeviceProblem dp(first, outs, KDA_BACKEND_CUDA_GENERIC);
  ASSERT_TRUE(dp.capture()) << kda_last_error();
  dp.replay();
  // New values, and a different layout with the same totals: cu_seqlens is read on the device at replay.
  s.seqlens = {1, 100, 70, 0};
  Case second = make_case(s, seed + 1);
  dp.replace_inputs(second);
  dp.poison_outputs();
  dp.replay();
  dp.download(outs);
  Oracle o = run_oracle(second);
  const Tolerance tol = tolerance_for(s.in_dtype, ComputeClass::kFp32);
  const ErrorStats eo = compare_out(outs.out, o, tol);
  EXPECT_TRUE(eo.pass) << eo.summary();
  const ErrorStats es = compare_state(outs.final_state, o, tol, int64_t{s.K} * s.V);
  EXPECT_TRUE(es.pass) << es.summary();
}

// Identical calls give identical bits, also after a different call ran in between (no stale state).
TEST_F(CudaBehaviour, DeterministicAndNoStaleState) {
  CaseSpec s = correctness_case_base("determinism");
  s.seqlens = {64, 3, 200};
  Case c = make_case(s, run_seed());
  Outputs o1 = make_outputs(c, s.in_dtype, KDA_DTYPE_FLOAT32), o2 = o1;
  DeviceProblem dp(c, o1, KDA_BACKEND_CUDA_GENERIC);
  ASSERT_EQ(dp.run(), KDA_STATUS_SUCCESS) << kda_last_error();
  dp.download(o1);
  {
    CaseSpec other = correctness_case_base("other");
    other.gate = KDA_GATE_SOFTPLUS;
    Case c2 = make_case(other, run_seed() + 7);
    Outputs oo = make_outputs(c2, other.in_dtype, KDA_DTYPE_FLOAT32);
    DeviceProblem dp2(c2, oo, KDA_BACKEND_CUDA_GENERIC);
    ASSERT_EQ(dp2.run(), KDA_STATUS_SUCCESS) << kda_last_error();
  }
  dp.poison_outputs();
  ASSERT_EQ(dp.run(), KDA_STATUS_SUCCESS) << kda_last_error();
  dp.download(o2);
  EXPECT_EQ(o1.out.bytes, o2.out.bytes);
  EXPECT_EQ(o1.final_state.bytes, o2.final_state.bytes);
}

}  // namespace
}  // namespace kda::testing
