// test_cpu_backend.cpp: the CPU backend against the float64 reference on random and hostile inputs, judged by
// the element-wise and relative-RMSE bounds of tools/common/compare.h (derivation: docs/numerics.md). A fresh
// seed every run; a failure prints it (replay with KDA_SEED=<seed>).
#include <gtest/gtest.h>

#include <cmath>

#include "common/cases.h"
#include "common/compare.h"

namespace kda::testing {
namespace {

CaseSpec base(const std::string& name) {
  CaseSpec s;
  s.name = name;
  s.B = 2;
  s.T = 150;
  s.H = 2;
  s.HV = 2;
  s.K = 64;
  s.V = 64;
  return s;
}

std::vector<CaseSpec> cases() {
  std::vector<CaseSpec> v;
  v.push_back(base("bounded_bf16"));
  { CaseSpec s = base("fp32_inputs_fp32_out"); s.in_dtype = s.g_dtype = s.beta_dtype = KDA_DTYPE_FLOAT32; v.push_back(s); }
  { CaseSpec s = base("fp16_inputs"); s.in_dtype = s.g_dtype = s.beta_dtype = KDA_DTYPE_FLOAT16; v.push_back(s); }
  { CaseSpec s = base("fp32_gate_and_beta"); s.g_dtype = s.beta_dtype = KDA_DTYPE_FLOAT32; v.push_back(s); }
  { CaseSpec s = base("grouped_value_heads"); s.H = 2; s.HV = 6; v.push_back(s); }
  { CaseSpec s = base("k128_v64"); s.K = 128; s.V = 64; v.push_back(s); }
  { CaseSpec s = base("k64_v128"); s.K = 64; s.V = 128; v.push_back(s); }
  { CaseSpec s = base("k256_v256"); s.B = 1; s.T = 80; s.H = 1; s.HV = 1; s.K = 256; s.V = 256; v.push_back(s); }
  { CaseSpec s = base("k16_v32"); s.K = 16; s.V = 32; v.push_back(s); }
  {
    // Unbounded softplus gate: A_log = ln 4 and g ~ N(3, 2) decay about 12 nats per token (over 1000 bits per
    // 64 tokens), and 5% of (token, head) pairs add a +30 spike (one token decaying about 130 nats).
    CaseSpec s = base("softplus_over_1000_bits_per_64_tokens");
    s.gate = KDA_GATE_SOFTPLUS;
    s.recipe.A_log_fixed = std::log(4.0);
    s.recipe.g_mean = 3.0;
    s.recipe.g_std = 2.0;
    s.recipe.g_spike_prob = 0.05;
    s.recipe.g_spike = 30.0;
    v.push_back(s);
  }
  { CaseSpec s = base("softplus_mixed_dead_and_immortal"); s.gate = KDA_GATE_SOFTPLUS; s.recipe.g_bimodal = 12; v.push_back(s); }
  { CaseSpec s = base("gates_exactly_zero"); s.gate = KDA_GATE_LOG_DECAY; s.recipe.g_zero = true; v.push_back(s); }
  { CaseSpec s = base("log_decay_gate"); s.gate = KDA_GATE_LOG_DECAY; s.recipe.g_std = 2.0; v.push_back(s); }
  { CaseSpec s = base("bounded_saturated_at_lower_bound"); s.recipe.g_mean = 40; v.push_back(s); }
  { CaseSpec s = base("bounded_without_A_log"); s.has_A_log = false; v.push_back(s); }
  { CaseSpec s = base("bounded_half_channels_near_bound"); s.recipe.g_bimodal = 6; s.recipe.g_std = 1; v.push_back(s); }
  {
    CaseSpec s = base("every_channel_fast_decay");
    s.recipe.A_log_fixed = -2;
    s.recipe.g_mean = -8;
    s.recipe.g_std = 1;
    v.push_back(s);
  }
  { CaseSpec s = base("near_identical_keys_beta_near_1"); s.recipe.key_jitter = 1e-3; s.recipe.beta_mean = 12; v.push_back(s); }
  { CaseSpec s = base("repeated_keys"); s.recipe.key_jitter = 0; v.push_back(s); }
  { CaseSpec s = base("beta_near_0"); s.recipe.beta_mean = -12; v.push_back(s); }
  { CaseSpec s = base("negative_eigenvalues_beta_near_2"); s.neg_eigval = true; s.recipe.beta_mean = 8; v.push_back(s); }
  { CaseSpec s = base("beta_probabilities"); s.beta_logits = false; v.push_back(s); }
  { CaseSpec s = base("h0_up_to_1e4"); s.recipe.h0_std = 3000; v.push_back(s); }
  { CaseSpec s = base("tiny_h0"); s.recipe.h0_std = 1e-30; v.push_back(s); }
  { CaseSpec s = base("k_first_state"); s.v_first = false; v.push_back(s); }
  { CaseSpec s = base("no_initial_no_final_state"); s.has_h0 = false; s.want_final = false; v.push_back(s); }
  { CaseSpec s = base("q_zero_rows"); s.recipe.q_zero_rows = true; v.push_back(s); }
  { CaseSpec s = base("no_l2norm_custom_scale"); s.l2norm = false; s.recipe.qkv_std = 0.08; s.default_scale = false; s.scale = 0.3f; v.push_back(s); }
  { CaseSpec s = base("chunk16"); s.chunk_size = 16; v.push_back(s); }
  { CaseSpec s = base("chunk32"); s.chunk_size = 32; v.push_back(s); }
  {
    // Lengths around the chunk size C = 64, empty sequences included.
    CaseSpec s = base("packed_int32_lengths_around_chunk");
    s.seqlens = {1, 63, 64, 65, 0, 129, 0, 2};
    v.push_back(s);
  }
  { CaseSpec s = base("packed_int64"); s.seqlens = {17, 0, 200, 5}; s.cu_dtype = KDA_DTYPE_INT64; v.push_back(s); }
  { CaseSpec s = base("packed_all_empty_but_one"); s.seqlens = {0, 0, 1, 0}; v.push_back(s); }
  { CaseSpec s = base("length_1_fixed"); s.T = 1; v.push_back(s); }
  { CaseSpec s = base("length_63"); s.T = 63; v.push_back(s); }
  { CaseSpec s = base("length_64"); s.T = 64; v.push_back(s); }
  { CaseSpec s = base("length_65"); s.T = 65; v.push_back(s); }
  { CaseSpec s = base("empty_T0"); s.T = 0; v.push_back(s); }
  { CaseSpec s = base("long_2048_k128"); s.B = 1; s.T = 2048; s.H = 1; s.HV = 1; s.K = 128; s.V = 128; v.push_back(s); }
  return v;
}

class CpuBackend : public ::testing::TestWithParam<CaseSpec> {};

TEST_P(CpuBackend, MatchesReference) {
  const CaseSpec& s = GetParam();
  const uint64_t seed = run_seed();
  SCOPED_TRACE("case " + s.name + " seed " + std::to_string(seed) + " (replay: KDA_SEED=" + std::to_string(seed) + ")");
  Case c = make_case(s, seed);
  Oracle o = run_oracle(c);
  Outputs outs = make_outputs(c, s.in_dtype, KDA_DTYPE_FLOAT32);  // NaN-poisoned
  kda_forward_args_t a = host_args(c, outs, KDA_BACKEND_CPU);
  ASSERT_EQ(kda_forward(&a, nullptr, 0, nullptr), KDA_STATUS_SUCCESS) << kda_last_error();

  const Tolerance tol = tolerance_for(s.in_dtype, ComputeClass::kFp32);
  const ErrorStats eo = compare_out(outs.out, o, tol);
  EXPECT_TRUE(eo.pass) << "out: " << eo.summary() << " [" << tol.describe() << "]";
  if (s.want_final) {
    const ErrorStats es = compare_state(outs.final_state, o, tol, int64_t{s.K} * s.V);
    EXPECT_TRUE(es.pass) << "final_state: " << es.summary();
    RecordProperty("state", es.summary());
  }
  RecordProperty("out", eo.summary());
}

INSTANTIATE_TEST_SUITE_P(Cases, CpuBackend, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<CaseSpec>& i) { return i.param.name; });

// Strided (non-contiguous) inputs give the same bits as contiguous ones: q and k read from a buffer with padding
// between heads.
TEST(CpuBackendLayout, StridedInputsMatchContiguous) {
  CaseSpec s = base("strided");
  const uint64_t seed = run_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Case c = make_case(s, seed);
  Outputs a_out = make_outputs(c, s.in_dtype, KDA_DTYPE_FLOAT32);
  kda_forward_args_t a = host_args(c, a_out, KDA_BACKEND_CPU);
  ASSERT_EQ(kda_forward(&a, nullptr, 0, nullptr), KDA_STATUS_SUCCESS) << kda_last_error();

  const int64_t pad = 8, rowlen = s.K + pad;
  HostTensor qs = make_tensor(c.q.dtype, {s.B, s.T, s.H, rowlen});
  HostTensor ks = make_tensor(c.k.dtype, {s.B, s.T, s.H, rowlen});
  for (int64_t i = 0; i < c.q.numel(); ++i) {
    const int64_t r = i / s.K, d = i % s.K;
    qs.set(r * rowlen + d, c.q.at(i));
    ks.set(r * rowlen + d, c.k.at(i));
  }
  Outputs b_out = make_outputs(c, s.in_dtype, KDA_DTYPE_FLOAT32);
  kda_forward_args_t b = host_args(c, b_out, KDA_BACKEND_CPU);
  b.q.data = qs.data();
  b.k.data = ks.data();
  for (kda_tensor_t* t : {&b.q, &b.k}) {
    t->strides[3] = 1;
    t->strides[2] = rowlen;
    t->strides[1] = rowlen * s.H;
    t->strides[0] = rowlen * s.H * s.T;
  }
  ASSERT_EQ(kda_forward(&b, nullptr, 0, nullptr), KDA_STATUS_SUCCESS) << kda_last_error();
  EXPECT_EQ(a_out.out.bytes, b_out.out.bytes);
  EXPECT_EQ(a_out.final_state.bytes, b_out.final_state.bytes);
}

// Two identical calls give identical bits, whatever the thread count.
TEST(CpuBackendLayout, DeterministicAcrossThreadCounts) {
  CaseSpec s = base("determinism");
  s.HV = 4;
  s.H = 2;
  Case c = make_case(s, run_seed());
  Outputs o1 = make_outputs(c, s.in_dtype, KDA_DTYPE_FLOAT32), o2 = o1;
  kda_forward_args_t a = host_args(c, o1, KDA_BACKEND_CPU);
  a.cpu_threads = 1;
  ASSERT_EQ(kda_forward(&a, nullptr, 0, nullptr), KDA_STATUS_SUCCESS);
  kda_forward_args_t b = host_args(c, o2, KDA_BACKEND_CPU);
  b.cpu_threads = 2;
  ASSERT_EQ(kda_forward(&b, nullptr, 0, nullptr), KDA_STATUS_SUCCESS);
  EXPECT_EQ(o1.out.bytes, o2.out.bytes);
  EXPECT_EQ(o1.final_state.bytes, o2.final_state.bytes);
}

}  // namespace
}  // namespace kda::testing
