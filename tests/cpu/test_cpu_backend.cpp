// test_cpu_backend.cpp: the CPU backend against the float64 reference on random and hostile inputs, judged by
// the element-wise and relative-RMSE bounds of tools/common/compare.h (derivation: docs/numerics.md). A fresh
// seed every run; a failure prints it (replay with KDA_SEED=<seed>).
#include <gtest/gtest.h>

#include <cmath>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "common/cases.h"
#include "common/compare.h"
#include "common/suites.h"

namespace kda::testing {
namespace {

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
  const ForwardVerdict v = judge_forward(c, o, outs.out, s.want_final ? &outs.final_state : nullptr, tol);
  EXPECT_TRUE(v.out.pass) << "out: " << v.out.summary() << " [" << tol.describe() << "]";
  if (s.want_final) {
    EXPECT_TRUE(v.state.pass) << "final_state: " << v.state.summary();
    RecordProperty("state", v.state.summary());
  }
  RecordProperty("out", v.out.summary());
  if (v.key_norm_delta >= 0) RecordProperty("key_norm_delta_u", std::to_string(v.key_norm_delta));
}

// With fewer (sequence, value head) chains than threads the backend also splits each chain (its chunks' phase 1,
// then blocks of its state rows, two where V = 128): the same bits as one thread running whole chains.
TEST_P(CpuBackend, ChainsSplitAcrossThreadsGiveTheSameBits) {
  const CaseSpec& s = GetParam();
  const uint64_t seed = run_seed();
  SCOPED_TRACE("case " + s.name + " seed " + std::to_string(seed) + " (replay: KDA_SEED=" + std::to_string(seed) + ")");
  Case c = make_case(s, seed);
  Outputs whole = make_outputs(c, s.in_dtype, KDA_DTYPE_FLOAT32), split = whole;
  kda_forward_args_t a = host_args(c, whole, KDA_BACKEND_CPU);
  a.cpu_threads = 1;
  ASSERT_EQ(kda_forward(&a, nullptr, 0, nullptr), KDA_STATUS_SUCCESS) << kda_last_error();
  kda_forward_args_t b = host_args(c, split, KDA_BACKEND_CPU);
  b.cpu_threads = static_cast<int>(3 * c.N * s.HV + 1);
  ASSERT_EQ(kda_forward(&b, nullptr, 0, nullptr), KDA_STATUS_SUCCESS) << kda_last_error();
  EXPECT_EQ(whole.out.bytes, split.out.bytes);
  EXPECT_EQ(whole.final_state.bytes, split.final_state.bytes);
}

INSTANTIATE_TEST_SUITE_P(Cases, CpuBackend, ::testing::ValuesIn(correctness_cases()),
                         [](const ::testing::TestParamInfo<CaseSpec>& i) { return i.param.name; });

// Strided (non-contiguous) inputs give the same bits as contiguous ones: q and k read from a buffer with padding
// between heads.
TEST(CpuBackendLayout, StridedInputsMatchContiguous) {
  CaseSpec s = correctness_case_base("strided");
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
  CaseSpec s = correctness_case_base("determinism");
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

#if defined(__x86_64__)
// The backend flushes subnormal results in its workers (forward_cpu.cpp, FlushSubnormals) and must hand the caller
// back its own floating-point mode: with one thread the parallel region runs on the caller's thread itself. Checked
// with the caller's flush-to-zero off and on, and by arithmetic after the call: a subnormal product survives.
TEST(CpuBackendLayout, CallersFloatingPointModeRestored) {
  CaseSpec s = correctness_case_base("mxcsr");
  Case c = make_case(s, run_seed());
  const unsigned entry = _mm_getcsr();
  for (const unsigned ftz : {0u, static_cast<unsigned>(_MM_FLUSH_ZERO_ON)}) {
    for (const int threads : {1, 2}) {
      Outputs o = make_outputs(c, s.in_dtype, KDA_DTYPE_FLOAT32);
      kda_forward_args_t a = host_args(c, o, KDA_BACKEND_CPU);
      a.cpu_threads = threads;
      // The control bits (rounding, masks, FTZ, DAZ), not the sticky exception flags (the low six), which any
      // arithmetic may raise.
      const unsigned flags = 0x3Fu;
      const unsigned mode = (entry & ~static_cast<unsigned>(_MM_FLUSH_ZERO_MASK) & ~flags) | ftz;
      _mm_setcsr(mode);
      const kda_status_t st = kda_forward(&a, nullptr, 0, nullptr);
      const unsigned after = _mm_getcsr() & ~flags;
      volatile float tiny = 1e-30f, scale = 1e-10f;
      const float product = tiny * scale;  // 1e-40: subnormal unless flushed
      _mm_setcsr(entry);
      ASSERT_EQ(st, KDA_STATUS_SUCCESS) << kda_last_error();
      EXPECT_EQ(after, mode) << "threads " << threads << ", caller's FTZ " << (ftz != 0);
      if (ftz == 0) EXPECT_GT(product, 0.0f) << "threads " << threads << ": a subnormal was flushed after the call";
    }
  }
}
#endif

}  // namespace
}  // namespace kda::testing
