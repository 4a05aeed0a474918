// test_cuda_backward.cpp: the CUDA backward (KDA_BACKEND_CUDA_GENERIC and AUTO on CUDA tensors) against the float64
// reference backward on the same rounded inputs, by compare_grad (docs/numerics.md, "Gradients"): small and medium
// cases crossing the 64-token recompute segments, packed batches with empty and length-1 sequences, grouped value
// heads, both state layouts, the three gates (incl. the unbounded softplus with huge single-token decays), beta as
// logits (with negative eigenvalues) and as probabilities, with and without the L2 norm, h0 and dS_final, K and V in
// {64, 128}, fp32 and rounded gradient tensors, one 8192-token case; plus NaN-poisoned outputs (every element
// written), bitwise determinism across calls, and the NOT_SUPPORTED answer outside K, V in {64, 128}.
// Skips itself where no GPU is present.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <random>
#include <string>

#include "api/validate.h"
#include "common/cases.h"
#include "common/compare.h"
#include "common/device.h"
#include "reference/backward.h"

namespace kda::testing {
namespace {

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  }
};

struct BwdCase {
  CaseSpec s;
  bool dfinal = true;
  bool grads_in_input_dtype = false;  // false: fp32 gradient tensors
};
void PrintTo(const BwdCase& c, std::ostream* os) { *os << c.s.name; }

// Device buffers freed at scope exit.
struct DeviceBuffers {
  std::vector<void*> ptrs;
  ~DeviceBuffers() {
    for (void* p : ptrs) cudaFree(p);
  }
  void* alloc(size_t bytes) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(bytes, 16)), cudaSuccess);
    ptrs.push_back(p);
    return p;
  }
  kda_tensor_t upload(const HostTensor& t) {
    if (!t.present()) return kda_tensor_none();
    void* p = alloc(t.bytes.size());
    EXPECT_EQ(cudaMemcpy(p, t.data(), t.bytes.size(), cudaMemcpyHostToDevice), cudaSuccess);
    return t.view(p, KDA_DEVICE_CUDA);
  }
  // A gradient tensor, NaN-poisoned (0xFF bytes) so an unwritten element fails.
  kda_tensor_t output(const HostTensor& t) {
    if (!t.present()) return kda_tensor_none();
    void* p = alloc(t.bytes.size());
    EXPECT_EQ(cudaMemset(p, 0xFF, t.bytes.size()), cudaSuccess);
    return t.view(p, KDA_DEVICE_CUDA);
  }
};

void download(HostTensor& t, const kda_tensor_t& d) {
  if (t.present()) {
    ASSERT_EQ(cudaMemcpy(t.data(), d.data, t.bytes.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  }
}

struct Grads {
  HostTensor dq, dk, dv, dg, dbeta, dA_log, ddt_bias, dh0;
};

// Runs the CUDA backward of case c with upstream gradients dout / dfinal; returns the status.
kda_status_t run_device(Case& c, const HostTensor& dout, const HostTensor& dfinal, kda_backend_t be, bool input_dtype,
                        Grads* g) {
  auto like = [&](const HostTensor& x, kda_dtype_t own) {
    return x.present() ? make_tensor(input_dtype ? own : KDA_DTYPE_FLOAT32, x.shape) : HostTensor{};
  };
  g->dq = like(c.q, c.q.dtype); g->dk = like(c.k, c.k.dtype); g->dv = like(c.v, c.v.dtype);
  g->dg = like(c.g, c.g.dtype); g->dbeta = like(c.beta, c.beta.dtype);
  g->dA_log = like(c.A_log, KDA_DTYPE_FLOAT32); g->ddt_bias = like(c.dt_bias, KDA_DTYPE_FLOAT32);
  g->dh0 = like(c.h0, KDA_DTYPE_FLOAT32);
  DeviceBuffers buf;
  Outputs unused = make_outputs(c, c.spec.in_dtype, KDA_DTYPE_FLOAT32);
  kda_backward_args_t a;
  kda_backward_args_init(&a);
  a.forward = host_args(c, unused, be);
  kda_forward_args_t& f = a.forward;
  f.q = buf.upload(c.q); f.k = buf.upload(c.k); f.v = buf.upload(c.v); f.g = buf.upload(c.g);
  f.beta = buf.upload(c.beta); f.A_log = buf.upload(c.A_log); f.dt_bias = buf.upload(c.dt_bias);
  f.initial_state = buf.upload(c.h0); f.cu_seqlens = buf.upload(c.cu_seqlens);
  f.out = kda_tensor_none();
  f.final_state = kda_tensor_none();
  a.dout = buf.upload(dout);
  a.dfinal_state = buf.upload(dfinal);
  a.dq = buf.output(g->dq); a.dk = buf.output(g->dk); a.dv = buf.output(g->dv); a.dg = buf.output(g->dg);
  a.dbeta = buf.output(g->dbeta); a.dA_log = buf.output(g->dA_log); a.ddt_bias = buf.output(g->ddt_bias);
  a.dh0 = buf.output(g->dh0);
  size_t ws_bytes = 0;
  kda_status_t st = kda_backward_workspace_size(&a, &ws_bytes);
  if (st != KDA_STATUS_SUCCESS) return st;
  void* ws = ws_bytes ? buf.alloc(ws_bytes) : nullptr;
  if (ws) {
    EXPECT_EQ(cudaMemset(ws, 0xFF, ws_bytes), cudaSuccess);
  }  // no reliance on a zeroed workspace
  cudaStream_t stream = nullptr;
  EXPECT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  st = kda_backward(&a, ws, ws_bytes, stream);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaStreamDestroy(stream);
  if (st != KDA_STATUS_SUCCESS) return st;
  download(g->dq, a.dq); download(g->dk, a.dk); download(g->dv, a.dv); download(g->dg, a.dg);
  download(g->dbeta, a.dbeta); download(g->dA_log, a.dA_log); download(g->ddt_bias, a.ddt_bias);
  download(g->dh0, a.dh0);
  return st;
}

struct Upstream {
  HostTensor dout, dfinal;
};

Upstream make_upstream(const Case& c, bool with_dfinal, uint64_t seed) {
  std::mt19937_64 rng(seed + 101);
  std::normal_distribution<double> normal(0.0, 1.0);
  Upstream u;
  u.dout = make_tensor(c.spec.in_dtype, {c.spec.B, c.spec.T, c.spec.HV, c.spec.V});
  for (int64_t i = 0; i < u.dout.numel(); ++i) u.dout.set(i, normal(rng));  // rounded to its dtype by set()
  if (with_dfinal) {
    const int64_t r2 = c.spec.v_first ? c.spec.V : c.spec.K, r3 = c.spec.v_first ? c.spec.K : c.spec.V;
    u.dfinal = make_tensor(KDA_DTYPE_FLOAT32, {c.N, c.spec.HV, r2, r3});
    for (int64_t i = 0; i < u.dfinal.numel(); ++i) u.dfinal.set(i, 0.1 * normal(rng));
  }
  return u;
}

void expect_backward_matches_reference(const BwdCase& bc, kda_backend_t be) {
  const uint64_t seed = run_seed();
  const CaseSpec& s = bc.s;
  SCOPED_TRACE("case " + s.name + " seed " + std::to_string(seed) + " (replay: KDA_SEED=" + std::to_string(seed) + ")");
  Case c = make_case(s, seed);
  Upstream up = make_upstream(c, bc.dfinal, seed);

  // The oracle: the float64 reverse recurrence on the same rounded inputs and upstream gradients.
  Outputs unused = make_outputs(c, KDA_DTYPE_FLOAT64, KDA_DTYPE_FLOAT64);
  kda_forward_args_t fa = host_args(c, unused, KDA_BACKEND_REFERENCE);
  ForwardParams p;
  ASSERT_TRUE(validate_forward(&fa, &p).ok());
  std::vector<double> dout(static_cast<size_t>(up.dout.numel())), dfinal(static_cast<size_t>(up.dfinal.numel()));
  for (size_t i = 0; i < dout.size(); ++i) dout[i] = up.dout.at(static_cast<int64_t>(i));
  for (size_t i = 0; i < dfinal.size(); ++i) dfinal[i] = up.dfinal.at(static_cast<int64_t>(i));
  reference::Gradients ref;
  ASSERT_TRUE(reference::backward<double>(p, dout.data(), dfinal.empty() ? nullptr : dfinal.data(), &ref).ok());

  Grads g;
  ASSERT_EQ(run_device(c, up.dout, up.dfinal, be, bc.grads_in_input_dtype, &g), KDA_STATUS_SUCCESS) << kda_last_error();

  const Tolerance tol = tolerance_for(KDA_DTYPE_FLOAT32, ComputeClass::kFp32, longest_sequence(s));
  const int64_t H = s.H, HV = s.HV, K = s.K, V = s.V;
  struct Item {
    const char* name;
    const HostTensor* got;
    const std::vector<double>* ref;
    const std::vector<double>* mag;
    GradLayout layout;
  };
  std::vector<Item> items = {{"dq", &g.dq, &ref.dq, nullptr, {H, K, 64}},
                             {"dk", &g.dk, &ref.dk, nullptr, {H, K, 64}},
                             {"dv", &g.dv, &ref.dv, nullptr, {HV, V, 64}},
                             {"dg", &g.dg, &ref.dg, &ref.mag_dg, {HV, K, 64}},
                             {"dbeta", &g.dbeta, &ref.dbeta, &ref.mag_dbeta, {HV, 1, 64}}};
  if (g.dA_log.present()) items.push_back({"dA_log", &g.dA_log, &ref.dA_log, &ref.mag_dA_log, {1, HV, 1}});
  if (g.ddt_bias.present()) items.push_back({"ddt_bias", &g.ddt_bias, &ref.ddt_bias, &ref.mag_ddt_bias, {HV, K, 1}});
  if (g.dh0.present()) items.push_back({"dh0", &g.dh0, &ref.dh0, nullptr, {HV, V * K, 1}});
  std::printf("  %s\n", s.name.c_str());
  for (const Item& it : items) {
    const ErrorStats e = compare_grad(*it.got, *it.ref, it.mag, tol, it.layout);
    EXPECT_TRUE(e.pass) << it.name << ": " << e.summary() << " [" << tol.describe() << "]";
    ::testing::Test::RecordProperty(it.name, e.summary());
    std::printf("    %-9s %s\n", it.name, e.summary().c_str());
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

class CudaBackward : public GpuTest, public ::testing::WithParamInterface<BwdCase> {};

TEST_P(CudaBackward, MatchesReference) { expect_backward_matches_reference(GetParam(), KDA_BACKEND_CUDA_GENERIC); }

INSTANTIATE_TEST_SUITE_P(Cases, CudaBackward, ::testing::ValuesIn(backward_cases()),
                         [](const ::testing::TestParamInfo<BwdCase>& i) { return i.param.s.name; });
INSTANTIATE_TEST_SUITE_P(Large, CudaBackward, ::testing::ValuesIn(large_backward_cases()),
                         [](const ::testing::TestParamInfo<BwdCase>& i) { return i.param.s.name; });

class CudaBackwardBehaviour : public GpuTest {};

TEST_F(CudaBackwardBehaviour, AutoDispatchesToCuda) {
  BwdCase c{base("auto_dispatch")};
  c.s.seqlens = {40, 0, 90};
  expect_backward_matches_reference(c, KDA_BACKEND_AUTO);
}

// Identical calls give identical bits (no atomics; fixed-order sums), also with grouped heads and packing.
TEST_F(CudaBackwardBehaviour, Deterministic) {
  CaseSpec s = base("determinism");
  s.seqlens = {64, 3, 130};
  s.H = 1;
  s.HV = 2;
  s.gate = KDA_GATE_SOFTPLUS;
  Case c = make_case(s, run_seed());
  Upstream up = make_upstream(c, true, 3);
  Grads g1, g2;
  ASSERT_EQ(run_device(c, up.dout, up.dfinal, KDA_BACKEND_CUDA_GENERIC, false, &g1), KDA_STATUS_SUCCESS) << kda_last_error();
  ASSERT_EQ(run_device(c, up.dout, up.dfinal, KDA_BACKEND_CUDA_GENERIC, false, &g2), KDA_STATUS_SUCCESS) << kda_last_error();
  EXPECT_EQ(g1.dq.bytes, g2.dq.bytes);
  EXPECT_EQ(g1.dk.bytes, g2.dk.bytes);
  EXPECT_EQ(g1.dv.bytes, g2.dv.bytes);
  EXPECT_EQ(g1.dg.bytes, g2.dg.bytes);
  EXPECT_EQ(g1.dbeta.bytes, g2.dbeta.bytes);
  EXPECT_EQ(g1.dA_log.bytes, g2.dA_log.bytes);
  EXPECT_EQ(g1.ddt_bias.bytes, g2.ddt_bias.bytes);
  EXPECT_EQ(g1.dh0.bytes, g2.dh0.bytes);
}

TEST_F(CudaBackwardBehaviour, UnsupportedHeadDimIsNamed) {
  CaseSpec s = base("k32");
  s.K = s.V = 32;
  Case c = make_case(s, 1);
  Upstream up = make_upstream(c, false, 1);
  Grads g;
  EXPECT_EQ(run_device(c, up.dout, up.dfinal, KDA_BACKEND_CUDA_GENERIC, false, &g), KDA_STATUS_NOT_SUPPORTED);
  EXPECT_NE(std::string(kda_last_error()).find("K and V in {64, 128}"), std::string::npos) << kda_last_error();
}

}  // namespace
}  // namespace kda::testing
