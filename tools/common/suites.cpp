// suites.cpp: the case lists of suites.h.
#include "common/suites.h"

#include <cmath>

namespace kda::testing {

CaseSpec correctness_case_base(const std::string& name) {
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

std::vector<CaseSpec> correctness_cases() {
  std::vector<CaseSpec> v;
  v.push_back(correctness_case_base("bounded_bf16"));
  { CaseSpec s = correctness_case_base("fp32_inputs_fp32_out"); s.in_dtype = s.g_dtype = s.beta_dtype = KDA_DTYPE_FLOAT32; v.push_back(s); }
  { CaseSpec s = correctness_case_base("fp16_inputs"); s.in_dtype = s.g_dtype = s.beta_dtype = KDA_DTYPE_FLOAT16; v.push_back(s); }
  { CaseSpec s = correctness_case_base("fp32_gate_and_beta"); s.g_dtype = s.beta_dtype = KDA_DTYPE_FLOAT32; v.push_back(s); }
  { CaseSpec s = correctness_case_base("grouped_value_heads"); s.H = 2; s.HV = 6; v.push_back(s); }
  { CaseSpec s = correctness_case_base("k128_v64"); s.K = 128; s.V = 64; v.push_back(s); }
  { CaseSpec s = correctness_case_base("k64_v128"); s.K = 64; s.V = 128; v.push_back(s); }
  { CaseSpec s = correctness_case_base("k256_v256"); s.B = 1; s.T = 80; s.H = 1; s.HV = 1; s.K = 256; s.V = 256; v.push_back(s); }
  { CaseSpec s = correctness_case_base("k16_v32"); s.K = 16; s.V = 32; v.push_back(s); }
  {
    // Unbounded softplus gate: A_log = ln 4 and g ~ N(3, 2) decay about 12 nats per token (over 1000 bits per
    // 64 tokens), and 5% of (token, head) pairs add a +30 spike (one token decaying about 130 nats).
    CaseSpec s = correctness_case_base("softplus_over_1000_bits_per_64_tokens");
    softplus_spikes(s, std::log(4.0), 3.0, 2.0, 0.05, 30.0);
    v.push_back(s);
  }
  { CaseSpec s = correctness_case_base("softplus_mixed_dead_and_immortal"); s.gate = KDA_GATE_SOFTPLUS; s.recipe.g_bimodal = 12; v.push_back(s); }
  {
    // exp(A_log) overflows fp32 (A_log = 100); g + dt_bias near -100 keeps the true decay moderate, so
    // exp(A_log) * softplus(x) must be formed without inf * 0.
    CaseSpec s = correctness_case_base("softplus_huge_A_log");
    s.gate = KDA_GATE_SOFTPLUS;
    s.recipe.A_log_fixed = 100;
    s.recipe.g_mean = -101;
    s.recipe.g_std = 1;
    v.push_back(s);
  }
  {
    // Single tokens that decay by 1e4 nats (1% of (token, head) pairs), in the middle of a block: exponents
    // between later tokens must not be formed as differences of sums that contain the spike.
    CaseSpec s = correctness_case_base("log_decay_single_token_spikes_1e4_nats");
    s.gate = KDA_GATE_LOG_DECAY;
    s.g_dtype = KDA_DTYPE_FLOAT32;
    s.recipe.g_mean = 0.3;
    s.recipe.g_std = 0.2;
    s.recipe.g_spike_prob = 0.02;
    s.recipe.g_spike = 1e4;
    v.push_back(s);
  }
  { CaseSpec s = correctness_case_base("bounded_huge_A_log"); s.recipe.A_log_fixed = 100; v.push_back(s); }
  { CaseSpec s = correctness_case_base("qk_norm_sums_overflow_fp32"); s.recipe.qk_std = 1e20; v.push_back(s); }
  { CaseSpec s = correctness_case_base("gates_exactly_zero"); s.gate = KDA_GATE_LOG_DECAY; s.recipe.g_zero = true; v.push_back(s); }
  { CaseSpec s = correctness_case_base("log_decay_gate"); s.gate = KDA_GATE_LOG_DECAY; s.recipe.g_std = 2.0; v.push_back(s); }
  { CaseSpec s = correctness_case_base("bounded_saturated_at_lower_bound"); s.recipe.g_mean = 40; v.push_back(s); }
  { CaseSpec s = correctness_case_base("bounded_without_A_log"); s.has_A_log = false; v.push_back(s); }
  { CaseSpec s = correctness_case_base("bounded_half_channels_near_bound"); s.recipe.g_bimodal = 6; s.recipe.g_std = 1; v.push_back(s); }
  {
    CaseSpec s = correctness_case_base("every_channel_fast_decay");
    s.recipe.A_log_fixed = -2;
    s.recipe.g_mean = -8;
    s.recipe.g_std = 1;
    v.push_back(s);
  }
  { CaseSpec s = correctness_case_base("near_identical_keys_beta_near_1"); s.recipe.key_jitter = 1e-3; s.recipe.beta_mean = 12; v.push_back(s); }
  { CaseSpec s = correctness_case_base("repeated_keys"); s.recipe.key_jitter = 0; v.push_back(s); }
  { CaseSpec s = correctness_case_base("beta_near_0"); s.recipe.beta_mean = -12; v.push_back(s); }
  { CaseSpec s = correctness_case_base("negative_eigenvalues_beta_near_2"); s.neg_eigval = true; s.recipe.beta_mean = 8; v.push_back(s); }
  { CaseSpec s = correctness_case_base("beta_probabilities"); s.beta_logits = false; v.push_back(s); }
  { CaseSpec s = correctness_case_base("h0_up_to_1e4"); s.recipe.h0_std = 3000; v.push_back(s); }
  { CaseSpec s = correctness_case_base("tiny_h0"); s.recipe.h0_std = 1e-30; v.push_back(s); }
  { CaseSpec s = correctness_case_base("k_first_state"); s.v_first = false; v.push_back(s); }
  { CaseSpec s = correctness_case_base("no_initial_no_final_state"); s.has_h0 = false; s.want_final = false; v.push_back(s); }
  { CaseSpec s = correctness_case_base("q_zero_rows"); s.recipe.q_zero_rows = true; v.push_back(s); }
  { CaseSpec s = correctness_case_base("no_l2norm_custom_scale"); s.l2norm = false; s.recipe.qkv_std = 0.08; s.default_scale = false; s.scale = 0.3f; v.push_back(s); }
  { CaseSpec s = correctness_case_base("chunk16"); s.chunk_size = 16; v.push_back(s); }
  { CaseSpec s = correctness_case_base("chunk32"); s.chunk_size = 32; v.push_back(s); }
  {
    // Lengths around the chunk size C = 64, empty sequences included.
    CaseSpec s = correctness_case_base("packed_int32_lengths_around_chunk");
    s.seqlens = {1, 63, 64, 65, 0, 129, 0, 2};
    v.push_back(s);
  }
  { CaseSpec s = correctness_case_base("packed_int64"); s.seqlens = {17, 0, 200, 5}; s.cu_dtype = KDA_DTYPE_INT64; v.push_back(s); }
  { CaseSpec s = correctness_case_base("packed_all_empty_but_one"); s.seqlens = {0, 0, 1, 0}; v.push_back(s); }
  { CaseSpec s = correctness_case_base("length_1_fixed"); s.T = 1; v.push_back(s); }
  { CaseSpec s = correctness_case_base("length_63"); s.T = 63; v.push_back(s); }
  { CaseSpec s = correctness_case_base("length_64"); s.T = 64; v.push_back(s); }
  { CaseSpec s = correctness_case_base("length_65"); s.T = 65; v.push_back(s); }
  { CaseSpec s = correctness_case_base("empty_T0"); s.T = 0; v.push_back(s); }
  { CaseSpec s = correctness_case_base("long_2048_k128"); s.B = 1; s.T = 2048; s.H = 1; s.HV = 1; s.K = 128; s.V = 128; v.push_back(s); }
  return v;
}

std::vector<CaseSpec> large_cases() {
  auto big = [](const std::string& name) {
    CaseSpec s;
    s.name = name;
    s.B = 1;
    s.T = 8192;
    s.H = s.HV = 64;
    s.K = s.V = 128;
    return s;
  };
  std::vector<CaseSpec> v;
  v.push_back(big("h64_8k_standard_weak_decay"));
  {
    CaseSpec s = big("h64_8k_half_channels_near_bound");
    s.recipe.g_bimodal = 6;
    s.recipe.g_std = 1;
    v.push_back(s);
  }
  {
    CaseSpec s = big("h64_8k_every_channel_0.5_to_1.2_nats");
    s.recipe.A_log_fixed = -2;
    s.recipe.g_mean = -8;
    s.recipe.g_std = 1;
    v.push_back(s);
  }
  {
    CaseSpec s = big("h32_8k_softplus_unbounded");
    s.H = s.HV = 32;
    s.gate = KDA_GATE_SOFTPLUS;
    s.recipe.A_log_fixed = std::log(4.0);
    s.recipe.g_mean = 1.0;
    s.recipe.g_std = 2.0;
    s.recipe.g_spike_prob = 0.01;
    s.recipe.g_spike = 40.0;
    v.push_back(s);
  }
  {
    CaseSpec s = big("h64_mixed_packed");
    s.seqlens = {1300, 547, 2048, 963, 271, 3063};
    v.push_back(s);
  }
  return v;
}

}  // namespace kda::testing
