// test_cuda_backward.cpp: the CUDA backwards (the token-recurrent KDA_BACKEND_CUDA_RECURRENT, and the chunked
// KDA_BACKEND_CUDA_CHUNKED, judged as tensor-core code, which GENERIC and AUTO run wherever it applies) against the float64 reference backward on
// the same rounded inputs, by compare_grad (docs/numerics.md, "Gradients"): small and medium
// cases crossing the 64-token recompute segments, packed batches with empty and length-1 sequences, grouped value
// heads, both state layouts, the three gates (incl. the unbounded softplus with huge single-token decays), beta as
// logits (with negative eigenvalues) and as probabilities, with and without the L2 norm, h0 and dS_final, K and V in
// {64, 128}, fp32 and rounded gradient tensors, one 8192-token case; plus NaN-poisoned outputs (every element
// written), bitwise determinism across calls, gradients through channel-strided views, and the NOT_SUPPORTED answer
// outside K, V in {64, 128}.
// Skips itself where no GPU is present.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/cases.h"
#include "common/backward_cases.h"
#include "common/compare.h"
#include "common/device.h"
#include "gpu/gpu_test.h"

namespace kda::testing {
namespace {


struct BwdCase {
  CaseSpec s;
  bool dfinal = true;
  bool grads_in_input_dtype = false;  // false: fp32 gradient tensors
};
void PrintTo(const BwdCase& c, std::ostream* os) { *os << c.s.name; }

// Runs the CUDA backward (tools/common/device.h: NaN-poisoned gradient tensors and workspace) into fresh gradient
// buffers: fp32, or the inputs' dtypes.
kda_status_t run_device(Case& c, const HostTensor& dout, const HostTensor& dfinal, kda_backend_t be, bool input_dtype,
                        Grads* g, bool forward_saved = false) {
  *g = make_grads(c, input_dtype);
  Upstream up{dout, dfinal};
  return run_backward_device(c, up, be, g, forward_saved);
}

// The chunked backward's products are bf16x3 tensor-core code (its reverse state pass) and take the forward's
// chunked inputs only (bf16 / fp16 q, k, v): anything else is NOT_SUPPORTED, named.
bool chunked_takes(const CaseSpec& s) { return s.in_dtype == KDA_DTYPE_BFLOAT16 || s.in_dtype == KDA_DTYPE_FLOAT16; }

// forward_saved: the forward runs first with save_for_backward into the workspace and the backward skips its recompute.
void expect_backward_matches_reference(const BwdCase& bc, kda_backend_t be, bool forward_saved = false) {
  const uint64_t seed = run_seed();
  const CaseSpec& s = bc.s;
  SCOPED_TRACE("case " + s.name + " seed " + std::to_string(seed) + " (replay: KDA_SEED=" + std::to_string(seed) + ")");
  Case c = make_case(s, seed);
  Upstream up = make_upstream(c, bc.dfinal, seed);

  // The oracle: the float64 reverse recurrence on the same rounded inputs and upstream gradients.
  const reference::Gradients ref = backward_oracle(c, up);

  Grads g;
  // HOPPER (the chunked backward with its sm_90a state passes) takes K = 128 of the chunked inputs on an sm_90 device
  // (this build has CuTe) and refuses the rest by name.
  const bool hopper_takes = cuda_device_cc_major() == 9 && s.K == 128 && s.V % 64 == 0 && chunked_takes(s);
  if (be == KDA_BACKEND_CUDA_HOPPER && !hopper_takes) {
    EXPECT_EQ(run_device(c, up.dout, up.dfinal, be, bc.grads_in_input_dtype, &g), KDA_STATUS_NOT_SUPPORTED);
    EXPECT_NE(std::string(kda_last_error()).find("KDA_BACKEND_CUDA_HOPPER"), std::string::npos) << kda_last_error();
    return;
  }
  if (be == KDA_BACKEND_CUDA_CHUNKED && !chunked_takes(s)) {
    EXPECT_EQ(run_device(c, up.dout, up.dfinal, be, bc.grads_in_input_dtype, &g), KDA_STATUS_NOT_SUPPORTED);
    EXPECT_NE(std::string(kda_last_error()).find("KDA_BACKEND_CUDA_CHUNKED"), std::string::npos) << kda_last_error();
    return;
  }
  ASSERT_EQ(run_device(c, up.dout, up.dfinal, be, bc.grads_in_input_dtype, &g, forward_saved), KDA_STATUS_SUCCESS)
      << kda_last_error();

  // RECURRENT is the exact token-recurrent reverse (fp32 class); GENERIC and AUTO run the chunked backward wherever
  // it applies, so they are judged as tensor-core code like it.
  const ComputeClass cls = be == KDA_BACKEND_CUDA_RECURRENT ? ComputeClass::kFp32 : ComputeClass::kTensorCore;
  const Tolerance tol = tolerance_for(KDA_DTYPE_FLOAT32, cls, longest_sequence(s));
  const std::vector<GradItem> items = grad_items(s, g, ref);
  std::printf("  %s\n", s.name.c_str());
  for (const GradItem& it : items) {
    const ErrorStats e = compare_grad(*it.got, *it.ref, it.mag, tol, it.layout);
    EXPECT_TRUE(e.pass) << it.name << ": " << e.summary() << " [" << tol.describe() << "]";
    ::testing::Test::RecordProperty(it.name, e.summary());
    std::printf("    %-9s %s\n", it.name.c_str(), e.summary().c_str());
  }
}

CaseSpec base(const std::string& name) {
  CaseSpec s;
  s.name = name;
  s.T = 100;
  s.H = 2;
  s.HV = 2;
  s.K = s.V = 64;
  return s;
}

std::vector<BwdCase> backward_cases() {
  std::vector<BwdCase> v;
  {
    BwdCase c{base("bounded_T100_k64")};
    v.push_back(c);
  }
  {
    BwdCase c{base("packed_softplus_group2_kfirst_negeig")};
    c.s.seqlens = {70, 0, 1, 131, 64};
    c.s.H = 1;
    c.s.HV = 2;
    c.s.gate = KDA_GATE_SOFTPLUS;
    c.s.neg_eigval = true;
    c.s.v_first = false;
    c.grads_in_input_dtype = true;
    v.push_back(c);
  }
  {
    BwdCase c{base("softplus_huge_decays_k128")};
    c.s.T = 200;
    c.s.K = c.s.V = 128;
    c.s.gate = KDA_GATE_SOFTPLUS;
    c.s.recipe.g_spike_prob = 0.05;
    c.s.recipe.g_spike = 40.0;
    c.s.recipe.g_mean = 2.0;
    v.push_back(c);
  }
  {
    BwdCase c{base("log_decay_beta_probs_no_norm_no_h0_fp32_k128_v64")};
    c.s.T = 150;
    c.s.K = 128;
    c.s.V = 64;
    c.s.gate = KDA_GATE_LOG_DECAY;
    c.s.beta_logits = false;
    c.s.l2norm = false;
    c.s.has_h0 = false;
    c.s.in_dtype = c.s.g_dtype = c.s.beta_dtype = KDA_DTYPE_FLOAT32;
    c.s.recipe.qkv_std = 0.2;
    c.dfinal = false;
    v.push_back(c);
  }
  {
    BwdCase c{base("bounded_no_A_log_fp16_batch2_k64_v128_group2")};
    c.s.B = 2;
    c.s.T = 300;
    c.s.H = 1;
    c.s.HV = 2;
    c.s.K = 64;
    c.s.V = 128;
    c.s.has_A_log = false;
    c.s.in_dtype = c.s.g_dtype = c.s.beta_dtype = KDA_DTYPE_FLOAT16;
    c.s.default_scale = false;
    c.s.scale = 0.3f;
    c.grads_in_input_dtype = true;
    v.push_back(c);
  }
  {
    // Near-identical keys and beta near 2: dbeta = du . (v - S'k) cancels (v - S'k is small once the state has
    // stored the key); the bound follows the size of that sum (mag_dbeta).
    BwdCase c{base("repeated_keys_beta_near_2_k128")};
    c.s.T = 256;
    c.s.K = c.s.V = 128;
    c.s.neg_eigval = true;
    c.s.recipe.key_jitter = 0.01;
    c.s.recipe.beta_mean = 4.0;
    c.s.recipe.beta_std = 0.2;
    v.push_back(c);
  }
  {
    BwdCase c{base("packed_bounded_vfirst_group4_k128_v64_no_dfinal")};
    c.s.seqlens = {1, 200, 0, 65, 3};
    c.s.H = 1;
    c.s.HV = 4;
    c.s.K = 128;
    c.s.V = 64;
    c.s.cu_dtype = KDA_DTYPE_INT64;
    c.dfinal = false;
    v.push_back(c);
  }
  // bf16 gradients of a group of one value head: where the tensor-core gradient pass writes dq and dk through the L2
  // norm itself (chunk_kernels.h grad_tc_finishes_qk): K = 128 on HOPPER (the halves a 2-CTA cluster; CHUNKED keeps
  // the per-row pass there), K = 64 on CHUNKED; packed with short and empty sequences (rows past a chunk's end), and
  // without the norm.
  {
    BwdCase c{base("packed_bounded_bf16_grads_k128")};
    c.s.seqlens = {70, 0, 1, 131, 64};
    c.s.K = c.s.V = 128;
    c.grads_in_input_dtype = true;
    v.push_back(c);
  }
  {
    BwdCase c{base("softplus_bf16_grads_k64")};
    c.s.T = 200;
    c.s.gate = KDA_GATE_SOFTPLUS;
    c.grads_in_input_dtype = true;
    v.push_back(c);
  }
  {
    BwdCase c{base("log_decay_no_norm_bf16_grads_k128")};
    c.s.T = 150;
    c.s.K = c.s.V = 128;
    c.s.gate = KDA_GATE_LOG_DECAY;
    c.s.l2norm = false;
    c.s.recipe.qkv_std = 0.2;
    c.grads_in_input_dtype = true;
    v.push_back(c);
  }
  return v;
}

std::vector<BwdCase> large_backward_cases() {
  BwdCase c{base("large_T8192_H4_k128_softplus")};
  c.s.T = 8192;
  c.s.H = c.s.HV = 4;
  c.s.K = c.s.V = 128;
  c.s.gate = KDA_GATE_SOFTPLUS;
  return {c};
}

// backward-full's probe near_identical_keys_beta_at_2 (keys 1e-3 apart, beta at 2) at K = 128 and its length, for
// the chunked backwards only: backward-quick's K = 64 probe and repeated_keys_beta_near_2_k128 passed while the
// recompute's factored diagonal blocks put this probe's dv at 1.7x its bound (session 23: here those kernels failed
// with dq at 1.46x; at T = 2048 they passed at 0.84x). The token-recurrent reverse (fp32 class) is not judged here:
// on this case its error varies with the seed around the fp32 bound (2048 tokens: 1.9e-5 and 7.9e-5 against
// 2.16e-5), an open question of that bound's conditioning (issue #9's notes), which kda-verify --suite backward-full
// --impl cuda-recurrent shows.
std::vector<BwdCase> chunked_stress_cases() {
  BwdCase c{base("near_identical_keys_beta_at_2_k128")};
  c.s.T = 4096;
  c.s.K = c.s.V = 128;
  c.s.neg_eigval = true;
  c.s.recipe.key_jitter = 1e-3;
  c.s.recipe.beta_mean = 12;
  return {c};
}

class CudaBackward : public GpuTest, public ::testing::WithParamInterface<BwdCase> {};

TEST_P(CudaBackward, MatchesReference) { expect_backward_matches_reference(GetParam(), KDA_BACKEND_CUDA_RECURRENT); }

INSTANTIATE_TEST_SUITE_P(Cases, CudaBackward, ::testing::ValuesIn(backward_cases()),
                         [](const ::testing::TestParamInfo<BwdCase>& i) { return i.param.s.name; });
INSTANTIATE_TEST_SUITE_P(Large, CudaBackward, ::testing::ValuesIn(large_backward_cases()),
                         [](const ::testing::TestParamInfo<BwdCase>& i) { return i.param.s.name; });

class CudaChunkedBackward : public GpuTest, public ::testing::WithParamInterface<BwdCase> {};

TEST_P(CudaChunkedBackward, MatchesReference) { expect_backward_matches_reference(GetParam(), KDA_BACKEND_CUDA_CHUNKED); }

INSTANTIATE_TEST_SUITE_P(Cases, CudaChunkedBackward, ::testing::ValuesIn(backward_cases()),
                         [](const ::testing::TestParamInfo<BwdCase>& i) { return i.param.s.name; });
INSTANTIATE_TEST_SUITE_P(Large, CudaChunkedBackward, ::testing::ValuesIn(large_backward_cases()),
                         [](const ::testing::TestParamInfo<BwdCase>& i) { return i.param.s.name; });
INSTANTIATE_TEST_SUITE_P(Stress, CudaChunkedBackward, ::testing::ValuesIn(chunked_stress_cases()),
                         [](const ::testing::TestParamInfo<BwdCase>& i) { return i.param.s.name; });

class CudaHopperBackward : public GpuTest, public ::testing::WithParamInterface<BwdCase> {};

TEST_P(CudaHopperBackward, MatchesReference) { expect_backward_matches_reference(GetParam(), KDA_BACKEND_CUDA_HOPPER); }

INSTANTIATE_TEST_SUITE_P(Cases, CudaHopperBackward, ::testing::ValuesIn(backward_cases()),
                         [](const ::testing::TestParamInfo<BwdCase>& i) { return i.param.s.name; });
INSTANTIATE_TEST_SUITE_P(Large, CudaHopperBackward, ::testing::ValuesIn(large_backward_cases()),
                         [](const ::testing::TestParamInfo<BwdCase>& i) { return i.param.s.name; });
INSTANTIATE_TEST_SUITE_P(Stress, CudaHopperBackward, ::testing::ValuesIn(chunked_stress_cases()),
                         [](const ::testing::TestParamInfo<BwdCase>& i) { return i.param.s.name; });

// The same with the forward keeping its tensors (save_for_backward) and the backward reading them (forward_saved):
// on mma.sync (CHUNKED) and with the sm_90a state passes (HOPPER, which refuses what it does not take, by name).
class CudaChunkedBackwardSaved : public GpuTest, public ::testing::WithParamInterface<BwdCase> {};

TEST_P(CudaChunkedBackwardSaved, MatchesReference) {
  if (!chunked_takes(GetParam().s)) GTEST_SKIP() << "not an input of the chunked path";
  expect_backward_matches_reference(GetParam(), KDA_BACKEND_CUDA_CHUNKED, true);
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaChunkedBackwardSaved, ::testing::ValuesIn(backward_cases()),
                         [](const ::testing::TestParamInfo<BwdCase>& i) { return i.param.s.name; });
INSTANTIATE_TEST_SUITE_P(Stress, CudaChunkedBackwardSaved, ::testing::ValuesIn(chunked_stress_cases()),
                         [](const ::testing::TestParamInfo<BwdCase>& i) { return i.param.s.name; });

class CudaHopperBackwardSaved : public GpuTest, public ::testing::WithParamInterface<BwdCase> {};

TEST_P(CudaHopperBackwardSaved, MatchesReference) {
  expect_backward_matches_reference(GetParam(), KDA_BACKEND_CUDA_HOPPER, true);
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaHopperBackwardSaved, ::testing::ValuesIn(backward_cases()),
                         [](const ::testing::TestParamInfo<BwdCase>& i) { return i.param.s.name; });
INSTANTIATE_TEST_SUITE_P(Large, CudaHopperBackwardSaved, ::testing::ValuesIn(large_backward_cases()),
                         [](const ::testing::TestParamInfo<BwdCase>& i) { return i.param.s.name; });
INSTANTIATE_TEST_SUITE_P(Stress, CudaHopperBackwardSaved, ::testing::ValuesIn(chunked_stress_cases()),
                         [](const ::testing::TestParamInfo<BwdCase>& i) { return i.param.s.name; });

class CudaBackwardBehaviour : public GpuTest {};

// Two backward runs of one case that must agree to the bit: packed, grouped heads, softplus gate, dS_final given.
struct BitsCase {
  Case c;
  Upstream up;
  explicit BitsCase(const char* name, int kv = 64) {
    CaseSpec s = base(name);
    s.K = s.V = kv;
    s.seqlens = {64, 3, 130};
    s.H = 1;
    s.HV = 2;
    s.gate = KDA_GATE_SOFTPLUS;
    c = make_case(s, run_seed());
    up = make_upstream(c, true, 3);
  }
  Grads run(kda_backend_t be, bool forward_saved = false) {
    Grads g;
    EXPECT_EQ(run_device(c, up.dout, up.dfinal, be, false, &g, forward_saved), KDA_STATUS_SUCCESS) << kda_last_error();
    return g;
  }
};

void expect_same_bits(const Grads& a, const Grads& b) {
  EXPECT_EQ(a.dq.bytes, b.dq.bytes);
  EXPECT_EQ(a.dk.bytes, b.dk.bytes);
  EXPECT_EQ(a.dv.bytes, b.dv.bytes);
  EXPECT_EQ(a.dg.bytes, b.dg.bytes);
  EXPECT_EQ(a.dbeta.bytes, b.dbeta.bytes);
  EXPECT_EQ(a.dA_log.bytes, b.dA_log.bytes);
  EXPECT_EQ(a.ddt_bias.bytes, b.ddt_bias.bytes);
  EXPECT_EQ(a.dh0.bytes, b.dh0.bytes);
}

// The backward on what a save_for_backward forward kept gives the same bits as the backward that recomputes it: both
// run phase 1 with the same precision (chunk_prepare.cu's kWide) and the same state pass.
TEST_F(CudaBackwardBehaviour, ChunkedSavedEqualsRecomputed) {
  BitsCase b("saved_equals_recomputed");
  expect_same_bits(b.run(KDA_BACKEND_CUDA_CHUNKED), b.run(KDA_BACKEND_CUDA_CHUNKED, true));
}

// The same on HOPPER, whose state pass saves with and without an output (TMA stores from the output warpgroup's first
// thread, idle in the recompute, beside the output in a saving forward): the same planes either way.
TEST_F(CudaBackwardBehaviour, HopperSavedEqualsRecomputed) {
  if (cuda_device_cc_major() != 9) GTEST_SKIP() << "HOPPER runs on sm_90 only";
  BitsCase b("hopper_saved_equals_recomputed", 128);  // HOPPER's head size
  expect_same_bits(b.run(KDA_BACKEND_CUDA_HOPPER), b.run(KDA_BACKEND_CUDA_HOPPER, true));
}

// A forward that saves for the backward writes the same outputs as any forward: its out and final state against the
// float64 reference, on CHUNKED and on HOPPER (whose state pass stores the saves by TMA beside the output there:
// kTmaOut). The saved-backward tests above read only the gradients.
void expect_saving_forward_matches_reference(kda_backend_t be, int kv) {
  const uint64_t seed = run_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (replay: KDA_SEED=" + std::to_string(seed) + ")");
  CaseSpec s = base("saving_forward_outputs");
  s.K = s.V = kv;
  s.seqlens = {64, 3, 130, 70};
  s.H = 1;
  s.HV = 2;
  s.gate = KDA_GATE_SOFTPLUS;
  Case c = make_case(s, seed);
  const Upstream up = make_upstream(c, true, seed);
  const Oracle o = run_oracle(c);
  Grads g = make_grads(c, false);
  DeviceBackwardProblem p(c, up, be, g, true);
  ASSERT_EQ(p.run(), KDA_STATUS_SUCCESS) << kda_last_error();
  Outputs outs = make_outputs(c, s.in_dtype, KDA_DTYPE_FLOAT32);
  ASSERT_EQ(cudaMemcpy(outs.out.data(), p.fwd.out.data, outs.out.bytes.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(outs.final_state.data(), p.fwd.final_state.data, outs.final_state.bytes.size(),
                       cudaMemcpyDeviceToHost),
            cudaSuccess);
  const Tolerance tol = tolerance_for(s.in_dtype, ComputeClass::kTensorCore, longest_sequence(s));
  const ForwardVerdict v = judge_forward(c, o, outs.out, &outs.final_state, tol);
  const ErrorStats &eo = v.out, &es = v.state;
  std::printf("  saving forward: out %s\n  saving forward: state %s\n", eo.summary().c_str(), es.summary().c_str());
  EXPECT_TRUE(eo.pass) << "out: " << eo.summary() << " [" << tol.describe() << "]";
  EXPECT_TRUE(es.pass) << "final_state: " << es.summary();
}

TEST_F(CudaBackwardBehaviour, ChunkedSavingForwardMatchesReference) {
  expect_saving_forward_matches_reference(KDA_BACKEND_CUDA_CHUNKED, 64);
}

TEST_F(CudaBackwardBehaviour, HopperSavingForwardMatchesReference) {
  if (cuda_device_cc_major() != 9) GTEST_SKIP() << "HOPPER runs on sm_90 only";
  expect_saving_forward_matches_reference(KDA_BACKEND_CUDA_HOPPER, 128);  // HOPPER's head size
}

// The gradients written through views with channel stride 2 (x[..., ::2] of a buffer twice the size; the chunked path
// takes only contiguous-channel inputs, but any gradient view): the generic kernel instances write them by stride
// (the fast ones are built for contiguous bf16 channels, chunk_common.cuh io_fast), every value where the contiguous
// run puts it, and the slots between them keep their poison.
TEST_F(CudaBackwardBehaviour, ChannelStridedGradientsMatchContiguous) {
  CaseSpec s = base("channel_strided_gradients");
  s.K = s.V = 128;
  s.seqlens = {100, 37};
  s.gate = KDA_GATE_SOFTPLUS;
  Case c = make_case(s, run_seed());
  const Upstream up = make_upstream(c, true, 5);
  Grads a, b;
  ASSERT_EQ(run_device(c, up.dout, up.dfinal, KDA_BACKEND_CUDA_GENERIC, true, &a), KDA_STATUS_SUCCESS)
      << kda_last_error();
  b = make_grads(c, true);
  DeviceBackwardProblem p(c, up, KDA_BACKEND_CUDA_GENERIC, b);
  struct Spread {
    HostTensor* host;
    void* wide;  // the device buffer the view spreads over
  };
  using Pair = std::pair<kda_tensor_t*, HostTensor*>;
  std::vector<Spread> spread;
  for (auto [view, host] : {Pair{&p.args.dq, &b.dq}, Pair{&p.args.dk, &b.dk}, Pair{&p.args.dv, &b.dv},
                            Pair{&p.args.dg, &b.dg}}) {
    void* wide = nullptr;
    ASSERT_EQ(cudaMalloc(&wide, 2 * host->bytes.size()), cudaSuccess);
    ASSERT_EQ(cudaMemset(wide, 0xFF, 2 * host->bytes.size()), cudaSuccess);
    view->data = wide;
    for (int i = 0; i < view->ndim; ++i) view->strides[i] *= 2;
    spread.push_back({host, wide});
  }
  ASSERT_EQ(p.run(), KDA_STATUS_SUCCESS) << kda_last_error();
  p.download(&b);  // dbeta, dA_log, ddt_bias, dh0 (contiguous); the four spread ones are read back below
  for (const Spread& x : spread) {
    const size_t es = x.host->bytes.size() / static_cast<size_t>(x.host->numel());
    std::vector<uint8_t> wide(2 * x.host->bytes.size());
    ASSERT_EQ(cudaMemcpy(wide.data(), x.wide, wide.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    cudaFree(x.wide);
    for (size_t i = 0; i < x.host->bytes.size() / es; ++i)
      for (size_t j = 0; j < es; ++j) {
        x.host->bytes[i * es + j] = wide[2 * i * es + j];
        EXPECT_EQ(wide[(2 * i + 1) * es + j], 0xFF) << "a gradient write between the view's elements";
      }
  }
  expect_same_bits(a, b);
}

TEST_F(CudaBackwardBehaviour, AutoDispatchesToCuda) {
  BwdCase c{base("auto_dispatch")};
  c.s.seqlens = {40, 0, 90};
  expect_backward_matches_reference(c, KDA_BACKEND_AUTO);
}

// Identical calls give identical bits (no atomics; fixed-order sums), also with grouped heads and packing; both
// CUDA backwards.
class CudaBackwardDeterminism : public GpuTest, public ::testing::WithParamInterface<kda_backend_t> {};
INSTANTIATE_TEST_SUITE_P(Backends, CudaBackwardDeterminism,
                         ::testing::Values(KDA_BACKEND_CUDA_RECURRENT, KDA_BACKEND_CUDA_CHUNKED));
TEST_P(CudaBackwardDeterminism, Deterministic) {
  BitsCase b("determinism");
  expect_same_bits(b.run(GetParam()), b.run(GetParam()));
}

TEST_F(CudaBackwardBehaviour, UnsupportedHeadDimIsNamed) {
  CaseSpec s = base("k32");
  s.K = s.V = 32;
  Case c = make_case(s, 1);
  Upstream up = make_upstream(c, false, 1);
  Grads g;
  EXPECT_EQ(run_device(c, up.dout, up.dfinal, KDA_BACKEND_CUDA_GENERIC, false, &g), KDA_STATUS_NOT_SUPPORTED);  // -> RECURRENT
  EXPECT_NE(std::string(kda_last_error()).find("K and V in {64, 128}"), std::string::npos) << kda_last_error();
}

}  // namespace
}  // namespace kda::testing
