// verify.cpp: the suites, implementations and verdicts of verify.h.
#include "common/verify.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <random>
#include <sstream>

#include "common/backward_cases.h"
#include "common/device.h"
#include "common/external_impl.h"
#include "common/suites.h"
#include "common/workloads.h"  // random_layout, shifted

namespace kda::testing {
namespace {

kda_status_t run_host(Case& c, Outputs& o, kda_backend_t be) {
  kda_forward_args_t a = host_args(c, o, be);
  return kda_forward(&a, nullptr, 0, nullptr);
}

kda_status_t run_device(Case& c, Outputs& o, kda_backend_t be) {
  DeviceProblem dp(c, o, be);
  dp.poison_outputs();
  const kda_status_t st = dp.run();
  if (st == KDA_STATUS_SUCCESS) dp.download(o);
  return st;
}

kda_status_t replay_device(Case& first, Case& second, Outputs& o, kda_backend_t be) {
  DeviceProblem dp(first, o, be);
  if (!dp.capture()) return KDA_STATUS_INTERNAL_ERROR;
  dp.replay();
  dp.replace_inputs(second);
  dp.poison_outputs();
  dp.replay();
  dp.download(o);
  return KDA_STATUS_SUCCESS;
}

kda_status_t decode_host(DecodeCase& d, HostTensor& out, HostTensor& pool, HostTensor* conv, kda_backend_t be) {
  kda_decode_args_t a = decode_host_args(d, out, pool, be);
  if (conv) {  // the call updates the copies, so d keeps the given conv states for the judge
    a.q_conv_state = conv[0].view();
    a.k_conv_state = conv[1].view();
    a.v_conv_state = conv[2].view();
  }
  return kda_decode(&a, nullptr, 0, nullptr);
}

kda_status_t decode_device(DecodeCase& d, HostTensor& out, HostTensor& pool, HostTensor* conv, kda_backend_t be) {
  DeviceDecodeProblem dp(d, be);
  const kda_status_t st = dp.run();
  if (st == KDA_STATUS_SUCCESS) {
    dp.download(out, pool);
    if (conv) dp.download_conv(conv);
  }
  return st;
}

CaseSpec small(const std::string& name, int64_t T = 256) {
  CaseSpec s;
  s.name = name;
  s.B = 1;
  s.T = T;
  s.H = 2;
  s.HV = 2;
  s.K = s.V = 64;
  return s;
}

CaseSpec full(const std::string& name, int H, int64_t T) {
  CaseSpec s;
  s.name = name;
  s.B = 1;
  s.T = T;
  s.H = s.HV = H;
  s.K = s.V = 128;
  return s;
}

// Stress probes on a base spec: each one a way real or adversarial gates, keys, betas and states behave.
std::vector<CaseSpec> stress(const CaseSpec& b) {
  std::vector<CaseSpec> v;
  auto add = [&](const std::string& n, auto&& f) {
    CaseSpec s = b;
    s.name = "stress_" + n;
    f(s);
    v.push_back(s);
  };
  add("softplus_over_1000_bits_per_64_tokens", [](CaseSpec& s) { softplus_spikes(s, std::log(4.0), 3, 2, 0.02, 40); });
  // Moderate decay (~0.002-1 nats a token) with 3% of tokens decaying ~120 nats: some 16-token blocks of a chunk
  // span a huge exponent range and the rest a small one, so an implementation that picks its arithmetic per block by
  // range (a tensor-core form where it is safe, an exact pairwise one elsewhere) takes both in one chunk.
  add("softplus_spiked_blocks", [](CaseSpec& s) { softplus_spikes(s, std::log(4.0), 0, 0.5, 0.03, 30); });
  // Every channel decaying ~3.8 nats (~5.5 bits) a token, unbounded (log-decay gate): 16-token blocks sum to ~87
  // bits, and the block's fastest channel passes 96 in about half the blocks (K = 64: 31%, K = 128: 52%). An
  // implementation that factors a block's pair decays through a reference point where the range allows it (kda's
  // phase 1 below 96 bits, FLA's sub-chunk kernel for bounded gates) meets both sides of its edge in one chunk, with
  // operands spanning the most.
  add("decay_at_the_factoring_edge", [](CaseSpec& s) {
    s.gate = KDA_GATE_LOG_DECAY;
    s.recipe.g_mean = -3.78;
    s.recipe.g_std = 0.6;
  });
  add("gates_exactly_zero", [](CaseSpec& s) { s.gate = KDA_GATE_LOG_DECAY; s.recipe.g_zero = true; });
  add("all_channels_at_the_bound", [](CaseSpec& s) { s.recipe.g_mean = 40; });
  add("dead_and_immortal_channels", [](CaseSpec& s) { s.gate = KDA_GATE_SOFTPLUS; s.recipe.g_bimodal = 12; });
  add("near_identical_keys", [](CaseSpec& s) { s.recipe.key_jitter = 1e-3; s.recipe.beta_mean = 12; });
  add("exactly_repeated_keys", [](CaseSpec& s) { s.recipe.key_jitter = 0; });
  add("beta_near_0", [](CaseSpec& s) { s.recipe.beta_mean = -12; });
  add("beta_near_1", [](CaseSpec& s) { s.recipe.beta_mean = 12; });
  add("beta_at_2_negative_eigenvalues", [](CaseSpec& s) { s.neg_eigval = true; s.recipe.beta_mean = 12; });
  // Both at once: the key norm's rounding grows along the sequence for every implementation (verify_case fits it out;
  // docs/numerics.md, "The key norm's rounding"), and a plain forward's A_qk needs 3xTF32 here.
  add("near_identical_keys_beta_at_2", [](CaseSpec& s) {
    s.recipe.key_jitter = 1e-3;
    s.neg_eigval = true;
    s.recipe.beta_mean = 12;
  });
  add("h0_up_to_1e4", [](CaseSpec& s) { s.recipe.h0_std = 3000; });
  add("h0_tiny", [](CaseSpec& s) { s.recipe.h0_std = 1e-30; });
  add("q_zero_rows", [](CaseSpec& s) { s.recipe.q_zero_rows = true; });
  add("fast_decay_every_channel", [](CaseSpec& s) {
    s.recipe.A_log_fixed = -2;
    s.recipe.g_mean = -8;
    s.recipe.g_std = 1;
  });
  return v;
}

void add_layouts(std::vector<VerifyCase>& out, const CaseSpec& b, std::mt19937_64& rng, bool full_size) {
  auto add = [&](const std::string& n, std::vector<int64_t> lens) {
    CaseSpec s = b;
    s.name = "layout_" + n;
    s.seqlens = std::move(lens);
    out.push_back({"layout", s});
  };
  add("lengths_1_Cm1_C_Cp1_2Cp1", {1, 63, 64, 65, 129});
  add("empty_sequences", {0, 5, 0, 0, 70, 0});
  add("int64_offsets", {100, 3, 0, 28});
  out.back().spec.cu_dtype = KDA_DTYPE_INT64;
  std::uniform_int_distribution<int64_t> short_len(0, full_size ? 64 : 6);
  std::vector<int64_t> many(300);
  for (int64_t& l : many) l = short_len(rng);
  add("300_packed_sequences", many);
  const std::vector<int64_t> mixed = {1300, 547, 2048, 963, 271, 3063};
  std::vector<int64_t> m = mixed;
  if (!full_size)
    for (int64_t& l : m) l = (l + 7) / 8;
  add("standard_mixed_shifted_by_one", shifted(m));
  add("random_layout_a", random_layout(rng, full_size ? 8192 : 600, full_size ? 3000 : 200));
  add("random_layout_b", random_layout(rng, full_size ? 8192 : 600, full_size ? 300 : 70));
}

void add_holdouts(std::vector<VerifyCase>& out, const CaseSpec& b, std::mt19937_64& rng) {
  const Dist dists[] = {Dist::kHeavyTail, Dist::kLowRank, Dist::kCorrelated};
  const kda_gate_mode_t gates[] = {KDA_GATE_BOUNDED, KDA_GATE_SOFTPLUS, KDA_GATE_LOG_DECAY};
  for (Dist d : dists) {
    CaseSpec s = b;
    s.recipe.dist = d;
    s.gate = gates[std::uniform_int_distribution<int>(0, 2)(rng)];
    s.name = std::string("holdout_") + dist_name(d) + "_" +
             (s.gate == KDA_GATE_BOUNDED ? "bounded" : s.gate == KDA_GATE_SOFTPLUS ? "softplus" : "log_decay");
    out.push_back({"holdout", s});
  }
  // One more with every family, gate and std drawn at random.
  CaseSpec s = b;
  s.recipe.dist = dists[std::uniform_int_distribution<int>(0, 2)(rng)];
  s.gate = gates[std::uniform_int_distribution<int>(0, 2)(rng)];
  s.recipe.qkv_std = std::exp(std::uniform_real_distribution<double>(std::log(0.05), std::log(3.0))(rng));
  s.recipe.g_mean = std::uniform_real_distribution<double>(-4, 4)(rng);
  s.name = std::string("holdout_random_") + dist_name(s.recipe.dist);
  out.push_back({"holdout", s});
}

void add_behaviour(std::vector<VerifyCase>& out, const CaseSpec& b) {
  CaseSpec s = b;
  s.seqlens = {50, 0, 140, 1};
  s.name = "behaviour_two_identical_calls";
  out.push_back({"behaviour", s, Probe::kRepeat});
  s.name = "behaviour_after_a_different_call";
  out.push_back({"behaviour", s, Probe::kAfterOther});
  s.name = "behaviour_graph_replay_new_inputs";
  out.push_back({"behaviour", s, Probe::kGraphReplay});
}

}  // namespace

Implementation implementation_by_name(const std::string& name) {
  Implementation impl;
  impl.name = name;
  if (name == "cpu") {
    impl.run = [](Case& c, Outputs& o) { return run_host(c, o, KDA_BACKEND_CPU); };
    impl.backward = [](Case& c, const Upstream& up, Grads& g) { return run_backward_host(c, up, KDA_BACKEND_CPU, &g); };
    impl.decode = [](DecodeCase& d, HostTensor& o, HostTensor& p, HostTensor* cv) {
      return decode_host(d, o, p, cv, KDA_BACKEND_CPU);
    };
  } else if (name == "reference") {
    impl.run = [](Case& c, Outputs& o) { return run_host(c, o, KDA_BACKEND_REFERENCE); };
    impl.backward = [](Case& c, const Upstream& up, Grads& g) {
      return run_backward_host(c, up, KDA_BACKEND_REFERENCE, &g);
    };
    impl.decode = [](DecodeCase& d, HostTensor& o, HostTensor& p, HostTensor* cv) {
      return decode_host(d, o, p, cv, KDA_BACKEND_REFERENCE);
    };
  } else if (name == "cuda-generic") {
    // GENERIC's forward is the chunked path with tensor-core products wherever it applies (the recurrent kernel
    // elsewhere): judged as tensor-core code. Its decode is fp32 code.
    impl.cls = forward_class(KDA_BACKEND_CUDA_GENERIC, true);
    impl.run = [](Case& c, Outputs& o) { return run_device(c, o, KDA_BACKEND_CUDA_GENERIC); };
    impl.decode = [](DecodeCase& d, HostTensor& o, HostTensor& p, HostTensor* cv) {
      return decode_device(d, o, p, cv, KDA_BACKEND_CUDA_GENERIC);
    };
    impl.replay = [](Case& a, Case& b, Outputs& o) { return replay_device(a, b, o, KDA_BACKEND_CUDA_GENERIC); };
    // GENERIC's backward is the chunked one wherever it applies (the token-recurrent reverse elsewhere): judged as
    // tensor-core code.
    impl.backward_cls = ComputeClass::kTensorCore;
    impl.backward = [](Case& c, const Upstream& up, Grads& g) {
      return run_backward_device(c, up, KDA_BACKEND_CUDA_GENERIC, &g);
    };
  } else if (name == "cuda-recurrent") {  // the exact token-recurrent kernel: fp32 class
    impl.run = [](Case& c, Outputs& o) { return run_device(c, o, KDA_BACKEND_CUDA_RECURRENT); };
    impl.decode = [](DecodeCase& d, HostTensor& o, HostTensor& p, HostTensor* cv) {
      return decode_device(d, o, p, cv, KDA_BACKEND_CUDA_RECURRENT);
    };
    impl.replay = [](Case& a, Case& b, Outputs& o) { return replay_device(a, b, o, KDA_BACKEND_CUDA_RECURRENT); };
    // The exact token-recurrent reverse in fp32: fp32 class with the sqrt(L) growth.
    impl.backward = [](Case& c, const Upstream& up, Grads& g) {
      return run_backward_device(c, up, KDA_BACKEND_CUDA_RECURRENT, &g);
    };
  } else if (name == "cuda-chunked") {  // bf16x3 tensor-core products: judged as tensor-core code
    impl.cls = forward_class(KDA_BACKEND_CUDA_CHUNKED, true);
    impl.run = [](Case& c, Outputs& o) { return run_device(c, o, KDA_BACKEND_CUDA_CHUNKED); };
    impl.replay = [](Case& a, Case& b, Outputs& o) { return replay_device(a, b, o, KDA_BACKEND_CUDA_CHUNKED); };
    // The chunked backward: bf16x3 products in its reverse state pass, judged as tensor-core code.
    impl.backward_cls = ComputeClass::kTensorCore;
    impl.backward = [](Case& c, const Upstream& up, Grads& g) {
      return run_backward_device(c, up, KDA_BACKEND_CUDA_CHUNKED, &g);
    };
  } else if (name.rfind("cmd:", 0) == 0) {  // an external implementation, judged by the loosest class
    impl.cls = impl.decode_cls = ComputeClass::kTensorCore;
    const std::string command = name.substr(4);
    impl.run = [command](Case& c, Outputs& o) {
      std::string error;
      const kda_status_t st = run_external(command, c, o, &error);
      if (st != KDA_STATUS_SUCCESS) std::fprintf(stderr, "kda-verify: %s\n", error.c_str());
      return st;
    };
    impl.decode = [command](DecodeCase& d, HostTensor& o, HostTensor& p, HostTensor* cv) {
      std::string error;
      const kda_status_t st = run_external_decode(command, d, o, p, cv, &error);
      if (st != KDA_STATUS_SUCCESS) std::fprintf(stderr, "kda-verify: %s\n", error.c_str());
      return st;
    };
    impl.backward_cls = ComputeClass::kTensorCore;
    impl.backward_grads_in_input_dtype = true;  // as autograd returns them (FLA: dq.to(q))
    impl.backward = [command](Case& c, const Upstream& up, Grads& g) {
      std::string error;
      const kda_status_t st = run_external_backward(command, c, up, &g, &error);
      if (st != KDA_STATUS_SUCCESS) std::fprintf(stderr, "kda-verify: %s\n", error.c_str());
      return st;
    };
  }
  return impl;
}

std::vector<VerifyCase> verify_suite(const std::string& suite, uint64_t seed) {
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
  std::vector<VerifyCase> out;
  if (suite == "quick") {
    CaseSpec w = small("workload_standard_recipe_h4", 1024);
    w.H = w.HV = 4;
    out.push_back({"workload", w});
    CaseSpec kimi = small("workload_kimi_softplus_h4", 1024);
    kimi.H = kimi.HV = 4;
    kimi.gate = KDA_GATE_SOFTPLUS;
    out.push_back({"workload", kimi});
    CaseSpec k128 = small("workload_k128_grouped_heads", 300);
    k128.K = k128.V = 128;
    k128.HV = 4;
    out.push_back({"workload", k128});
    for (const CaseSpec& s : stress(small(""))) out.push_back({"stress", s});
    add_layouts(out, small(""), rng, false);
    add_holdouts(out, small(""), rng);
    add_behaviour(out, small(""));
  } else if (suite == "full") {
    for (int H : {96, 64}) {
      const std::string h = "h" + std::to_string(H);
      out.push_back({"workload", full("workload_" + h + "_fixed", H, 8192)});
      CaseSpec m = full("workload_" + h + "_mixed", H, 0);
      m.seqlens = {1300, 547, 2048, 963, 271, 3063};
      out.push_back({"workload", m});
      CaseSpec u = full("workload_" + h + "_uniform", H, 0);
      u.seqlens = std::vector<int64_t>(8, 1024);
      out.push_back({"workload", u});
    }
    // The other two input families of the workloads spec's accuracy table at its size (8192 tokens, H = 64, bounded
    // gate; the standard recipe is workload_h64_fixed): half the channels near the -5 bound and half near 0, and
    // every channel at 0.5-1.2 nats per token.
    CaseSpec half = full("workload_h64_half_channels_near_bound", 64, 8192);
    half.recipe.g_bimodal = 6;
    half.recipe.g_std = 1;
    out.push_back({"workload", half});
    CaseSpec fast = full("workload_h64_every_channel_0.5_to_1.2_nats", 64, 8192);
    fast.recipe.A_log_fixed = -2;
    fast.recipe.g_mean = -8;
    fast.recipe.g_std = 1;
    out.push_back({"workload", fast});
    CaseSpec kimi = full("workload_kimi_linear_h32_softplus", 32, 8192);
    kimi.gate = KDA_GATE_SOFTPLUS;
    out.push_back({"workload", kimi});
    CaseSpec longc = full("layout_one_128k_sequence", 4, 131072);
    out.push_back({"layout", longc});
    for (const CaseSpec& s : stress(full("", 8, 4096))) out.push_back({"stress", s});
    add_layouts(out, full("", 8, 0), rng, true);
    add_holdouts(out, full("", 16, 4096), rng);
    add_behaviour(out, full("", 8, 0));
  }
  return out;
}

VerifyResult verify_case(const VerifyCase& vc, const Implementation& impl, uint64_t seed) {
  VerifyResult r;
  r.name = vc.spec.name;
  r.family = vc.family;
  r.seed = seed;  // the case's own seed (callers derive it from the run seed and the case name)
  const auto t0 = std::chrono::steady_clock::now();
  const Tolerance tol = tolerance_for(vc.spec.in_dtype, impl.cls, longest_sequence(vc.spec));
  Case c = make_case(vc.spec, seed);
  Outputs o = make_outputs(c, vc.spec.in_dtype, KDA_DTYPE_FLOAT32);
  Case judged = c;  // the inputs whose oracle the result is compared with

  kda_status_t st = KDA_STATUS_SUCCESS;
  if (vc.probe == Probe::kGraphReplay) {
    if (!impl.replay) {
      r.skipped = r.pass = true;
      r.error = "not applicable: no CUDA graph for " + impl.name;
      return r;
    }
    CaseSpec other = vc.spec;
    other.seqlens = {1, 120, 70, 0};  // same count and total, different layout: offsets are read at replay
    judged = make_case(other, seed + 1);
    st = impl.replay(c, judged, o);
  } else {
    if (vc.probe == Probe::kAfterOther) {
      CaseSpec other_spec = vc.spec;
      other_spec.gate = KDA_GATE_SOFTPLUS;
      other_spec.seqlens = {3, 200, 0, 7};
      Case other = make_case(other_spec, seed + 2);
      Outputs oo = make_outputs(other, other_spec.in_dtype, KDA_DTYPE_FLOAT32);
      impl.run(other, oo);
    }
    st = impl.run(c, o);
  }
  if (st != KDA_STATUS_SUCCESS) {
    r.error = std::string("call failed: ") + kda_last_error();
    return r;
  }
  const Oracle oracle = run_oracle(judged);
  const ForwardVerdict fv = judge_forward(judged, oracle, o.out, vc.spec.want_final ? &o.final_state : nullptr, tol);
  r.out = fv.out;
  r.state = fv.state;
  r.pass = fv.pass;
  r.key_norm_delta = fv.key_norm_delta;
  if (vc.probe == Probe::kRepeat || vc.probe == Probe::kAfterOther) {
    Outputs o2 = make_outputs(c, vc.spec.in_dtype, KDA_DTYPE_FLOAT32);
    if (impl.run(c, o2) != KDA_STATUS_SUCCESS || o2.out.bytes != o.out.bytes ||
        o2.final_state.bytes != o.final_state.bytes) {
      r.pass = false;
      r.error = vc.probe == Probe::kRepeat ? "two identical calls gave different bits"
                                           : "the result after another call differs from a fresh call";
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

namespace {

// The backward cases on two bases: `work` for the three input families of the workloads spec, `probe` for the
// hostile and layout cases. full: the packed layouts at full length.
std::vector<BackwardCase> backward_cases(const CaseSpec& work, const CaseSpec& probe, bool full_size,
                                         std::mt19937_64& rng) {
  std::vector<BackwardCase> v;
  auto add = [&](const char* family, const CaseSpec& base, const std::string& name, auto&& f) {
    BackwardCase bc{family, base};
    bc.spec.name = "bwd_" + name;
    f(bc, bc.spec);
    v.push_back(bc);
  };
  const std::string h = "_h" + std::to_string(work.H);
  // The three input families of the workloads spec, bounded gate (lower bound -5).
  add("workload", work, "standard_recipe" + h, [](BackwardCase&, CaseSpec&) {});
  add("workload", work, "half_channels_near_bound" + h, [](BackwardCase&, CaseSpec& s) {
    s.recipe.g_bimodal = 6;
    s.recipe.g_std = 1;
  });
  add("workload", work, "every_channel_0.5_to_1.2_nats" + h, [](BackwardCase&, CaseSpec& s) {
    s.recipe.A_log_fixed = -2;
    s.recipe.g_mean = -8;
    s.recipe.g_std = 1;
  });
  // Gates: unbounded softplus (over 1000 bits per 64 tokens, single-token spikes), saturated bounded gates,
  // gates exactly 0, dead and immortal channels.
  add("stress", probe, "softplus_unbounded_spikes", [](BackwardCase&, CaseSpec& s) {
    s.gate = KDA_GATE_SOFTPLUS;
    s.recipe.A_log_fixed = std::log(4.0);
    s.recipe.g_mean = 3;
    s.recipe.g_std = 2;
    s.recipe.g_spike_prob = 0.02;
    s.recipe.g_spike = 40;
  });
  add("stress", probe, "saturated_gates_at_the_bound", [](BackwardCase&, CaseSpec& s) { s.recipe.g_mean = 40; });
  add("stress", probe, "gates_exactly_zero", [](BackwardCase&, CaseSpec& s) {
    s.gate = KDA_GATE_LOG_DECAY;
    s.recipe.g_zero = true;
  });
  add("stress", probe, "dead_and_immortal_channels_softplus", [](BackwardCase&, CaseSpec& s) {
    s.gate = KDA_GATE_SOFTPLUS;
    s.recipe.g_bimodal = 12;
  });
  // Keys and beta: the cancelling dbeta / dg sums (mag_dbeta, mag_dg carry the bound there).
  add("stress", probe, "near_identical_keys_beta_near_1", [](BackwardCase&, CaseSpec& s) {
    s.recipe.key_jitter = 1e-3;
    s.recipe.beta_mean = 12;
  });
  add("stress", probe, "near_identical_keys_beta_at_2", [](BackwardCase&, CaseSpec& s) {
    s.recipe.key_jitter = 1e-3;
    s.recipe.beta_mean = 12;
    s.neg_eigval = true;
  });
  add("stress", probe, "beta_near_0", [](BackwardCase&, CaseSpec& s) { s.recipe.beta_mean = -12; });
  add("stress", probe, "h0_up_to_1e4", [](BackwardCase&, CaseSpec& s) { s.recipe.h0_std = 3000; });
  // Layouts: packed batches with empty and length-1 sequences, grouped heads, both state layouts, with and
  // without dS_final and h0.
  const std::vector<int64_t> packed = full_size ? std::vector<int64_t>{0, 1, 1300, 0, 2048, 1, 963, 65, 0, 271}
                                                : std::vector<int64_t>{0, 1, 70, 0, 130, 1, 64, 0};
  add("layout", probe, "packed_empty_and_length_1", [&](BackwardCase&, CaseSpec& s) { s.seqlens = packed; });
  add("layout", probe, "packed_grouped_heads_k_first_state", [&](BackwardCase&, CaseSpec& s) {
    s.seqlens = packed;
    s.HV = 2 * s.H;
    s.v_first = false;
    s.cu_dtype = KDA_DTYPE_INT64;
  });
  // One sequence over more value heads than one wave of the 64-column wgmma state and reverse passes holds at
  // K = V = 128 (96 heads: 192 CTAs on the H200's 132 SMs): the shape whose last wave the launch plans treat apart
  // (chunk_map.h plan_state_pass's 32-column tail, overlap_first_heads), which the other backward cases never reach.
  // Three chunks keep the float64 oracle at a few seconds; full only (the quick suite runs in CI on the CPU, where
  // no such plan exists, ten times over in the verifier's own tests).
  if (full_size)
    add("layout", probe, "one_sequence_96_heads_k128", [](BackwardCase&, CaseSpec& s) {
      s.seqlens.clear();
      s.B = 1;
      s.T = 192;
      s.H = s.HV = 96;
      s.K = s.V = 128;
    });
  add("layout", probe, "grouped_heads_4_per_qk_head_no_dfinal", [](BackwardCase& b, CaseSpec& s) {
    s.HV = 4 * s.H;
    b.dfinal = false;
  });
  add("layout", probe, "k_first_state_no_h0_no_dfinal", [](BackwardCase& b, CaseSpec& s) {
    s.v_first = false;
    s.has_h0 = false;
    b.dfinal = false;
  });
  add("layout", probe, "h0_without_dfinal", [](BackwardCase& b, CaseSpec&) { b.dfinal = false; });
  add("layout", probe, "random_packed_layout", [&](BackwardCase&, CaseSpec& s) {
    s.seqlens = random_layout(rng, s.T, full_size ? 1500 : 120);
  });
  // Flags and dtypes: log-decay gate with beta as probabilities and no L2 norm (fp32 inputs); fp16 inputs with a
  // bounded gate without A_log and a custom scale; gradients in the inputs' dtype; K != V.
  add("variant", probe, "log_decay_beta_probs_no_l2norm_fp32", [](BackwardCase&, CaseSpec& s) {
    s.gate = KDA_GATE_LOG_DECAY;
    s.beta_logits = false;
    s.l2norm = false;
    s.in_dtype = s.g_dtype = s.beta_dtype = KDA_DTYPE_FLOAT32;
    s.recipe.qkv_std = 0.2;
  });
  add("variant", probe, "fp16_bounded_no_A_log_scale_0.3_fp16_grads", [](BackwardCase& b, CaseSpec& s) {
    s.in_dtype = s.g_dtype = s.beta_dtype = KDA_DTYPE_FLOAT16;
    s.has_A_log = false;
    s.default_scale = false;
    s.scale = 0.3f;
    b.grads_in_input_dtype = true;
  });
  add("variant", probe, "softplus_bf16_grads", [](BackwardCase& b, CaseSpec& s) {
    s.gate = KDA_GATE_SOFTPLUS;
    b.grads_in_input_dtype = true;
  });
  add("variant", probe, "k128_v64_heavy_tail", [](BackwardCase&, CaseSpec& s) {
    s.K = 128;
    s.V = 64;
    s.recipe.dist = Dist::kHeavyTail;
  });
  // K = V = 128 (the models' shape) in the quick suite too, whose probe is K = V = 64: the CUDA backward has kernel
  // instances that run only there (the products kernel's wgmma P1 on sm_90a), and a wrong build of one passed every
  // other quick case (session 38: backward-full failed every case). backward-full's probes are K = V = 128 already.
  if (!full_size)
    add("variant", probe, "k128_v128", [](BackwardCase&, CaseSpec& s) { s.K = s.V = 128; });
  return v;
}

}  // namespace

std::vector<BackwardCase> verify_backward_suite(const std::string& suite, uint64_t seed) {
  std::mt19937_64 rng(seed ^ 0x5bd1e9955bd1e995ull);
  if (suite == "backward-quick") {
    CaseSpec work = small("", 192);  // three 64-token blocks
    CaseSpec probe = small("", 128);
    return backward_cases(work, probe, false, rng);
  }
  if (suite == "backward-full") {
    // Sized so the float64 oracle backward of the whole suite takes a few minutes on 16 cores (its cost is
    // T HV K V per call, threaded over q/k heads): H = 64 at 8192 tokens for the workload families, H = 16 at 4096
    // tokens for the rest (packed layouts: 4650 tokens).
    CaseSpec work = full("", 64, 8192);
    CaseSpec probe = full("", 16, 4096);
    return backward_cases(work, probe, true, rng);
  }
  return {};
}

VerifyResult verify_backward_case(const BackwardCase& bc, const Implementation& impl, uint64_t seed,
                                  const Implementation* baseline) {
  VerifyResult r;
  r.name = bc.spec.name;
  r.family = bc.family;
  r.seed = seed;
  if (!impl.backward) {
    r.skipped = r.pass = true;
    r.error = "not applicable: " + impl.name + " has no backward";
    return r;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const Tolerance tol = tolerance_for(KDA_DTYPE_FLOAT32, impl.backward_cls, longest_sequence(bc.spec));
  Case c = make_case(bc.spec, seed);
  const Upstream up = make_upstream(c, bc.dfinal, seed);
  Grads g = make_grads(c, impl.backward_grads_in_input_dtype || bc.grads_in_input_dtype);
  if (impl.backward(c, up, g) != KDA_STATUS_SUCCESS) {
    r.error = std::string("call failed: ") + kda_last_error();
    return r;
  }
  const auto t1 = std::chrono::steady_clock::now();
  const reference::Gradients ref = backward_oracle(c, up);
  r.oracle_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  auto missing = [](const Grads& gr, const std::string& n) {
    return std::find(gr.missing.begin(), gr.missing.end(), n) != gr.missing.end();
  };
  r.pass = true;
  std::string not_provided;
  for (const GradItem& it : grad_items(bc.spec, g, ref)) {
    GradVerdict v;
    v.name = it.name;
    if (missing(g, it.name)) {
      // Parameter gradients an outside implementation cannot return are reported; the token gradients are required.
      v.provided = false;
      v.e.pass = false;
      not_provided += " " + it.name;
      if (it.name != "dA_log" && it.name != "ddt_bias" && it.name != "dh0") r.pass = false;
    } else {
      v.e = compare_grad(*it.got, *it.ref, it.mag, tol, it.layout);
      v.plain_rel_rmse = v.e.rel_rmse;
      r.pass = r.pass && v.e.pass;
    }
    r.grads.push_back(v);
  }
  if (!not_provided.empty()) r.error = "not provided:" + not_provided;
  // Outside the bounds with the in-kernel key norm and every gradient given: judged again with the key norm's
  // rounding fitted out, as the forward's (compare.h fit_key_norm), one delta per q / k head over every gradient,
  // along tangents taken by central differences of the oracle (k_hat scaled by 1 +- 2^-20: the truncation error is
  // second order in the step times the tangent's growth, ~(4 L 2^-20)^2 relative, 3e-4 at L = 4096).
  bool nonfinite = false;
  for (const GradVerdict& v : r.grads) nonfinite = nonfinite || v.e.nonfinite > 0;
  if (!r.pass && bc.spec.l2norm && not_provided.empty() && !nonfinite) {
    const double h = std::ldexp(1.0, -20);
    const reference::Gradients gp = backward_oracle(c, up, 1 + h), gm = backward_oracle(c, up, 1 - h);
    const std::vector<GradItem> items = grad_items(bc.spec, g, ref), ip = grad_items(bc.spec, g, gp),
                                im = grad_items(bc.spec, g, gm);
    std::vector<std::vector<double>> tangent(items.size()), bound(items.size());
    DeltaFit fit(bc.spec.H);
    for (size_t k = 0; k < items.size(); ++k) {
      const GradItem& it = items[k];
      tangent[k].resize(it.ref->size());
      for (size_t i = 0; i < tangent[k].size(); ++i) tangent[k][i] = ((*ip[k].ref)[i] - (*im[k].ref)[i]) / (2 * h);
      bound[k] = grad_bounds(*it.got, *it.ref, it.mag, tol, it.layout);
      for (int64_t i = 0; i < it.got->numel(); ++i)
        fit.add(key_head_of(it, bc.spec, i), it.got->at(i) - (*it.ref)[i], tangent[k][i], bound[k][i]);
    }
    const std::vector<double> delta = fit.solve(key_norm_delta_limit(bc.spec.K), &r.key_norm_delta);
    r.pass = true;
    for (size_t k = 0; k < items.size(); ++k) {
      const GradItem& it = items[k];
      std::vector<double> shift(tangent[k].size());
      for (size_t i = 0; i < shift.size(); ++i) shift[i] = delta[key_head_of(it, bc.spec, i)] * tangent[k][i];
      r.grads[k].e = compare_grad(*it.got, *it.ref, it.mag, tol, it.layout, &shift);
      r.pass = r.pass && r.grads[k].e.pass;
    }
  }
  if (baseline && baseline->backward) {
    // The same inputs and upstream gradients through the baseline; each gradient's relative RMSE must be no worse.
    Grads bg = make_grads(c, baseline->backward_grads_in_input_dtype);
    if (baseline->backward(c, up, bg) != KDA_STATUS_SUCCESS) {
      r.pass = false;
      r.error += std::string(r.error.empty() ? "" : "; ") + "baseline call failed";
    } else {
      const Tolerance btol = tolerance_for(KDA_DTYPE_FLOAT32, baseline->backward_cls, longest_sequence(bc.spec));
      std::vector<GradItem> bitems = grad_items(bc.spec, bg, ref);
      for (size_t i = 0; i < bitems.size() && i < r.grads.size(); ++i) {
        GradVerdict& v = r.grads[i];
        if (!v.provided || missing(bg, bitems[i].name)) continue;
        const ErrorStats be = compare_grad(*bitems[i].got, *bitems[i].ref, bitems[i].mag, btol, bitems[i].layout);
        v.baseline_rel_rmse = be.rel_rmse;
        if (!(v.plain_rel_rmse <= be.rel_rmse)) {
          char buf[160];
          std::snprintf(buf, sizeof buf, "%s%s rel RMSE %.3e worse than the baseline's %.3e",
                        r.error.empty() ? "" : "; ", v.name.c_str(), v.plain_rel_rmse, be.rel_rmse);
          r.error += buf;
          r.pass = false;
        }
      }
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

std::vector<DecodeSpec> verify_decode_suite(const std::string& suite) {
  if (suite == "decode-quick") {  // the small cases, then the fused ones (conv, norm, both)
    std::vector<DecodeSpec> v = decode_cases();
    for (const DecodeSpec& s : fused_decode_cases()) v.push_back(s);
    return v;
  }
  if (suite != "decode-full") return {};
  std::vector<DecodeSpec> v;
  auto serving = [](const std::string& name, int H, int64_t B) {
    DecodeSpec s;
    s.name = name;
    s.io.name = name;
    s.io.B = B;
    s.io.T = 1;
    s.io.H = s.io.HV = H;
    s.io.K = s.io.V = 128;
    s.slots = B + B / 3 + 5;
    s.padding = 0.1;
    return s;
  };
  for (int H : {32, 12})
    for (int64_t B : {1, 8, 256, 512})
      v.push_back(serving("decode_h" + std::to_string(H) + "_b" + std::to_string(B), H, B));
  {
    DecodeSpec s = serving("decode_spec_verify_h32_b128_4_tokens", 32, 128);
    s.io.T = 4;
    s.per_token = true;
    s.with_accepted = true;
    s.slots = 128 * 4 + 7;
    v.push_back(s);
  }
  { DecodeSpec s = serving("decode_k_first_pool_h32_b64", 32, 64); s.io.v_first = false; v.push_back(s); }
  {
    DecodeSpec s = serving("decode_softplus_over_1000_bits_h32_b64", 32, 64);
    s.io.gate = KDA_GATE_SOFTPLUS;
    s.io.recipe.A_log_fixed = std::log(4.0);
    s.io.recipe.g_mean = 3;
    s.io.recipe.g_spike_prob = 0.05;
    s.io.recipe.g_spike = 40;
    v.push_back(s);
  }
  {
    DecodeSpec s = serving("decode_h0_1e4_beta_2_h32_b64", 32, 64);
    s.io.recipe.h0_std = 3000;
    s.io.neg_eigval = true;
    s.io.recipe.beta_mean = 12;
    v.push_back(s);
  }
  { DecodeSpec s = serving("decode_all_padding_h32_b64", 32, 64); s.padding = 1.0; v.push_back(s); }
  { DecodeSpec s = serving("decode_bf16_pool_h32_b256", 32, 256); s.pool_dtype = KDA_DTYPE_BFLOAT16; v.push_back(s); }
  // The fusions at serving sizes (Kimi-Linear's short conv and gated RMSNorm; judged with the conv states): small
  // batches (CUDA: one kernel a (sequence, head)) and large ones (three kernels), a bf16 pool, a speculative verify.
  auto fused = [&](const std::string& name, int64_t B, bool conv, bool norm) {
    DecodeSpec s = serving(name, 32, B);
    s.conv = conv;
    s.norm = norm;
    return s;
  };
  v.push_back(fused("decode_fused_conv_norm_h32_b1", 1, true, true));
  v.push_back(fused("decode_fused_conv_norm_h32_b256", 256, true, true));
  v.push_back(fused("decode_fused_conv_h32_b64", 64, true, false));
  {
    DecodeSpec s = fused("decode_fused_norm_silu_h32_b4_bf16_pool", 4, false, true);
    s.norm_act = KDA_OUT_GATE_SILU;
    s.pool_dtype = KDA_DTYPE_BFLOAT16;
    v.push_back(s);
  }
  {
    DecodeSpec s = fused("decode_fused_spec_verify_h32_b4_3_tokens", 4, true, true);
    s.io.T = 3;
    s.per_token = true;
    s.with_accepted = true;
    s.slots = 4 * 3 + 5;
    v.push_back(s);
  }
  return v;
}

VerifyResult verify_decode_case(const DecodeSpec& s, const Implementation& impl, uint64_t seed) {
  VerifyResult r;
  r.name = s.name;
  r.family = "decode";
  r.seed = seed;
  if (!impl.decode) {
    r.skipped = r.pass = true;
    r.error = "not applicable: " + impl.name + " has no decode";
    return r;
  }
  const auto t0 = std::chrono::steady_clock::now();
  DecodeCase d = make_decode_case(s, seed);
  HostTensor out = make_tensor(d.c.spec.in_dtype, {d.c.spec.B, d.c.spec.T, d.c.spec.HV, d.c.spec.V});
  for (int64_t i = 0; i < out.numel(); ++i) out.set(i, std::numeric_limits<double>::quiet_NaN());
  HostTensor pool = d.pool;
  HostTensor conv[3] = {d.conv_state[0], d.conv_state[1], d.conv_state[2]};
  if (impl.decode(d, out, pool, s.conv ? conv : nullptr) != KDA_STATUS_SUCCESS) {
    r.error = std::string("call failed: ") + kda_last_error();
    return r;
  }
  // The fusions (short conv, gated RMSNorm) are judged by the hand-written fp64 fused decode, conv states too.
  const Tolerance tol = tolerance_for(d.c.spec.in_dtype, impl.decode_cls);
  const DecodeVerdict v = s.conv || s.norm
                              ? judge_fused_decode(d, decode_fused_oracle(d), out, pool, s.conv ? conv : nullptr, tol)
                              : judge_decode(d, decode_oracle(d), out, pool, tol);
  r.out = v.out;
  r.state = v.pool;
  r.pass = v.pass;
  if (v.untouched_changed) r.error = std::to_string(v.untouched_changed) + " elements of untouched slots changed";
  if (v.conv_wrong) r.error += (r.error.empty() ? "" : "; ") + std::to_string(v.conv_wrong) + " conv-state entries wrong";
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

std::string verify_row(const VerifyResult& r) {
  char buf[512];
  if (r.skipped) {
    std::snprintf(buf, sizeof buf, "%-46s %-9s %20llu  SKIP  %s", r.name.c_str(), r.family.c_str(),
                  static_cast<unsigned long long>(r.seed), r.error.c_str());
    return buf;
  }
  if (!r.grads.empty()) {  // backward: the worst gradient (by its share of either bound); all of them in the JSON
    const GradVerdict* w = nullptr;
    double worst = -1;
    for (const GradVerdict& v : r.grads) {
      if (!v.provided) continue;
      const double share = std::max(v.e.worst_ratio, v.e.rmse_bound > 0 ? v.e.rel_rmse / v.e.rmse_bound : 0.0);
      if (!(share <= worst)) {
        worst = share;
        w = &v;
      }
    }
    std::snprintf(buf, sizeof buf, "%-46s %-9s %20llu  %s  worst %-8s rmse %.3e (%5.3f of bound)  elem %6.3f  %5.1fs (oracle %.1fs)%s%s",
                  r.name.c_str(), r.family.c_str(), static_cast<unsigned long long>(r.seed), r.pass ? "PASS" : "FAIL",
                  w ? w->name.c_str() : "-", w ? w->e.rel_rmse : 0.0,
                  w && w->e.rmse_bound > 0 ? w->e.rel_rmse / w->e.rmse_bound : 0.0, w ? w->e.worst_ratio : 0.0,
                  r.seconds, r.oracle_seconds, r.error.empty() ? "" : "  ", r.error.c_str());
    // With --baseline: the gradient where ours comes closest to the baseline's relative RMSE (the no-worse rule).
    const GradVerdict* b = nullptr;
    for (const GradVerdict& v : r.grads)
      if (v.provided && std::isfinite(v.baseline_rel_rmse) && v.baseline_rel_rmse > 0 &&
          (!b || v.plain_rel_rmse / v.baseline_rel_rmse > b->plain_rel_rmse / b->baseline_rel_rmse))
        b = &v;
    std::string row = buf;
    if (r.key_norm_delta >= 0) {
      char fit[96];
      std::snprintf(fit, sizeof fit, "  (key norm fitted: |delta| <= %.2f u)", r.key_norm_delta);
      row += fit;
    }
    if (!b) return row;
    char tail[160];
    std::snprintf(tail, sizeof tail, "  baseline: %s %.3e (ours %.3gx theirs)", b->name.c_str(), b->baseline_rel_rmse,
                  b->plain_rel_rmse / b->baseline_rel_rmse);
    return row + tail;
  }
  std::snprintf(buf, sizeof buf, "%-46s %-9s %20llu  %s  out %.3e (%6.3f)  state %.3e (%6.3f)  %5.1fs%s%s",
                r.name.c_str(), r.family.c_str(), static_cast<unsigned long long>(r.seed), r.pass ? "PASS" : "FAIL",
                r.out.rel_rmse, r.out.worst_ratio, r.state.rel_rmse, r.state.worst_ratio, r.seconds,
                r.error.empty() ? "" : "  ", r.error.c_str());
  if (r.key_norm_delta < 0) return buf;
  char tail[96];  // the figures above are then those left after the fit
  std::snprintf(tail, sizeof tail, "  (key norm fitted: |delta| <= %.2f u)", r.key_norm_delta);
  return std::string(buf) + tail;
}

std::string verify_json(const std::vector<VerifyResult>& results, const std::string& suite, const std::string& impl,
                        uint64_t seed, const std::string& command) {
  std::ostringstream f;
  auto num = [](double x) {  // %.6g: small errors (1e-8) keep their digits
    char b[32];
    std::snprintf(b, sizeof b, "%.6g", x);
    return std::isfinite(x) ? std::string(b) : std::string("null");
  };
  auto esc = [](const std::string& x) {  // a JSON string body: commands and messages may hold quotes
    std::string o;
    for (char ch : x) {
      if (ch == '"' || ch == '\\') o += '\\';
      if (static_cast<unsigned char>(ch) < 0x20) ch = ' ';
      o += ch;
    }
    return o;
  };
  int failed = 0;
  for (const VerifyResult& r : results) failed += !r.pass;
  f << "{\n  \"tool\": \"kda-verify\",\n  \"suite\": \"" << suite << "\",\n  \"impl\": \"" << esc(impl)
    << "\",\n  \"seed\": " << seed << ",\n  \"command\": \"" << esc(command) << "\",\n  \"failed\": " << failed
    << ",\n  \"cases\": [\n";
  for (size_t i = 0; i < results.size(); ++i) {
    const VerifyResult& r = results[i];
    f << "    {\"case\": \"" << r.name << "\", \"family\": \"" << r.family << "\", \"seed\": " << r.seed
      << ", \"pass\": " << (r.pass ? "true" : "false") << ", \"skipped\": " << (r.skipped ? "true" : "false")
      << ", \"out_rel_rmse\": " << num(r.out.rel_rmse) << ", \"out_worst_ratio\": " << num(r.out.worst_ratio)
      << ", \"state_rel_rmse\": " << num(r.state.rel_rmse) << ", \"state_worst_ratio\": " << num(r.state.worst_ratio)
      << ", \"seconds\": " << num(r.seconds);
    if (r.key_norm_delta >= 0) f << ", \"key_norm_delta_u\": " << num(r.key_norm_delta);
    if (!r.grads.empty()) {
      f << ", \"oracle_seconds\": " << num(r.oracle_seconds) << ", \"grads\": {";
      for (size_t k = 0; k < r.grads.size(); ++k) {
        const GradVerdict& v = r.grads[k];
        f << (k ? ", " : "") << "\"" << v.name << "\": {\"provided\": " << (v.provided ? "true" : "false");
        if (v.provided)
          f << ", \"pass\": " << (v.e.pass ? "true" : "false") << ", \"rel_rmse\": " << num(v.e.rel_rmse)
            << ", \"rmse_bound\": " << num(v.e.rmse_bound) << ", \"worst_ratio\": " << num(v.e.worst_ratio)
            << ", \"worst_index\": " << v.e.worst_index << ", \"nonfinite\": " << v.e.nonfinite
            << ", \"baseline_rel_rmse\": " << num(v.baseline_rel_rmse);
        if (v.provided && r.key_norm_delta >= 0) f << ", \"plain_rel_rmse\": " << num(v.plain_rel_rmse);
        f << "}";
      }
      f << "}";
    }
    f << ", \"error\": \"" << esc(r.error) << "\"}"
      << (i + 1 < results.size() ? "," : "") << "\n";
  }
  f << "  ]\n}\n";
  return f.str();
}

}  // namespace kda::testing
