// test_checkpoints.cpp: prefix-cache state checkpoints. The reference's checkpoint j equals the final state of the
// reference run on the sequence's first offsets[j] tokens; the CPU backend's equal the reference's within the fp32
// state bounds; entries whose token count is negative or past the sequence are left untouched (bit for bit); and
// bad checkpoint arguments are refused with a message naming them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>

#include "common/cases.h"
#include "common/checkpoint_cases.h"
#include "common/checkpoints.h"
#include "common/compare.h"
#include "cpu/forward_cpu.h"

namespace kda::testing {
namespace {

constexpr double kSentinel = kCkptSentinel;

HostTensor run_with_checkpoints(Case& c, const HostTensor& offsets, int32_t interval, int64_t n_ckpt,
                                kda_backend_t be, int cpu_threads = 0) {
  HostTensor ck;
  EXPECT_EQ(run_host_checkpoints(c, offsets, interval, n_ckpt, be, &ck, cpu_threads), KDA_STATUS_SUCCESS)
      << kda_last_error();
  return ck;
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
  const HostTensor off = random_checkpoint_offsets(c, n_ckpt, rng, KDA_DTYPE_INT64);
  const HostTensor ck = run_with_checkpoints(c, off, 0, n_ckpt, KDA_BACKEND_REFERENCE);
  const std::vector<int64_t> lens = sequence_lengths(c);
  const int64_t per = int64_t{s.HV} * s.V * s.K;
  int64_t start = 0;
  for (int64_t n = 0; n < c.N; ++n) {
    for (int64_t j = 0; j < n_ckpt; ++j) {
      const int64_t cnt = checkpoint_count_of(off, 0, n, n_ckpt, j);
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

class CpuCheckpoints : public ::testing::TestWithParam<CkptCase> {};

TEST_P(CpuCheckpoints, MatchReference) {
  const CkptCase& k = GetParam();
  CaseSpec s = checkpoint_case_spec(k);
  s.V = 2 * cpu::kRowBlock;  // two row blocks a chain when the chains split over threads
  const uint64_t seed = run_seed();
  SCOPED_TRACE("case " + k.name + " seed " + std::to_string(seed));
  Case c = make_case(s, seed);
  std::mt19937_64 rng(seed);
  const int64_t n_ckpt = kCkptCaseEntries;
  const int32_t interval = k.offsets ? 0 : kCkptCaseInterval;
  const HostTensor off = k.offsets ? random_checkpoint_offsets(c, n_ckpt, rng, k.offset_dtype) : HostTensor{};
  const HostTensor ref = run_with_checkpoints(c, off, interval, n_ckpt, KDA_BACKEND_REFERENCE);
  const HostTensor got = run_with_checkpoints(c, off, interval, n_ckpt, KDA_BACKEND_CPU);
  // Written entries by the final-state rule; the others must still hold the sentinel bits.
  const Tolerance tol = tolerance_for(s.in_dtype, ComputeClass::kFp32);
  const CheckpointVerdict ref_v = judge_checkpoints(c, off, interval, n_ckpt, ref, ref,
                                                    make_checkpoints(c, n_ckpt, KDA_DTYPE_FLOAT64), tol);
  EXPECT_TRUE(ref_v.untouched_error.empty()) << "reference: " << ref_v.untouched_error;
  const CheckpointVerdict v = judge_checkpoints(c, off, interval, n_ckpt, ref, got,
                                                make_checkpoints(c, n_ckpt, KDA_DTYPE_FLOAT32), tol);
  EXPECT_TRUE(v.untouched_error.empty()) << v.untouched_error;
  EXPECT_GT(v.written, 0);
  EXPECT_TRUE(v.stats.pass) << v.stats.summary();
  // One thread running whole chains, and more threads than chains (each chain's state rows in blocks, each
  // block writing its rows of every checkpoint): the same bits.
  const HostTensor one = run_with_checkpoints(c, off, interval, n_ckpt, KDA_BACKEND_CPU, 1);
  const HostTensor split =
      run_with_checkpoints(c, off, interval, n_ckpt, KDA_BACKEND_CPU, static_cast<int>(3 * c.N * s.HV + 1));
  EXPECT_EQ(one.bytes, split.bytes);
}

INSTANTIATE_TEST_SUITE_P(Layouts, CpuCheckpoints, ::testing::ValuesIn(checkpoint_cases()),
                         [](const ::testing::TestParamInfo<CkptCase>& i) { return i.param.name; });

// The schedule helpers of common/checkpoints.h (which the CUDA kernel runs): walking next_checkpoint_count from -1
// visits exactly the distinct counts in [0, len] in increasing order, as the host backends' sorted list does; the
// warp-split scan (32 lanes, each folding every 32nd entry, then a min) finds the same next count; and the
// interval form's index / next helpers agree with the definition (j + 1) * interval.
TEST(CheckpointIndex, NextCountWalkMatchesSortedSchedule) {
  const uint64_t seed = run_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  float dummy = 0.0f;
  for (int trial = 0; trial < 400; ++trial) {
    const int64_t len = std::uniform_int_distribution<int64_t>(0, 70)(rng);
    const int64_t n_ckpt = std::uniform_int_distribution<int64_t>(0, 80)(rng);
    const int64_t N = 3, n = trial % N;
    const bool offsets = trial % 2 == 0;
    const bool i32 = trial % 4 == 0;
    std::vector<int32_t> o32(static_cast<size_t>(N * n_ckpt));
    std::vector<int64_t> o64(static_cast<size_t>(N * n_ckpt));
    for (size_t i = 0; i < o64.size(); ++i) {
      o64[i] = std::uniform_int_distribution<int64_t>(-3, len + 3)(rng);  // unsorted, repeats, out of range
      o32[i] = static_cast<int32_t>(o64[i]);
    }
    ForwardParams p;
    p.ckpt = &dummy;
    p.n_ckpt = n_ckpt;
    const int32_t interval = std::uniform_int_distribution<int32_t>(1, 9)(rng);
    if (offsets) {
      p.ckpt_offsets.data = i32 ? static_cast<const void*>(o32.data()) : static_cast<const void*>(o64.data());
      p.ckpt_offsets.dtype = i32 ? KDA_DTYPE_INT32 : KDA_DTYPE_INT64;
      p.ckpt_offsets.stride[0] = n_ckpt;
      p.ckpt_offsets.stride[1] = 1;
    } else {
      p.ckpt_interval = interval;
    }
    // The expected schedule: distinct counts in [0, len], sorted; and per count the entries holding it.
    std::vector<int64_t> want;
    for (int64_t j = 0; j < n_ckpt; ++j) {
      const int64_t t = offsets ? o64[n * n_ckpt + j] : (j + 1) * interval;
      if (t >= 0 && t <= len) want.push_back(t);
      if (!offsets) {
        ASSERT_EQ(interval_checkpoint_index(t, interval, n_ckpt), j);
        ASSERT_EQ(interval_checkpoint_index(t - 1, interval, n_ckpt), interval == 1 && j > 0 ? j - 1 : -1);
      }
    }
    std::sort(want.begin(), want.end());
    want.erase(std::unique(want.begin(), want.end()), want.end());
    std::vector<int64_t> got;
    for (int64_t after = -1;;) {
      const int64_t t = next_checkpoint_count(p, n, len, after);
      // The warp-split form of the same scan.
      int64_t lane_best[32];
      for (int lane = 0; lane < 32; ++lane) {
        lane_best[lane] = kNoCheckpoint;
        for (int64_t j = lane; j < n_ckpt; j += 32)
          lane_best[lane] = checkpoint_fold_next(lane_best[lane], p.checkpoint_tokens(n, j), after, len);
      }
      ASSERT_EQ(offsets ? *std::min_element(lane_best, lane_best + 32) : t, t);
      if (t == kNoCheckpoint) break;
      ASSERT_GT(t, after);
      got.push_back(t);
      after = t;
      ASSERT_LE(got.size(), want.size() + 1);
    }
    ASSERT_EQ(got, want) << "trial " << trial << " len " << len << " n_ckpt " << n_ckpt << " offsets " << offsets;
  }
  ForwardParams none;
  EXPECT_EQ(next_checkpoint_count(none, 0, 10, -1), kNoCheckpoint);
  EXPECT_EQ(interval_checkpoint_index(0, 4, 10), -1);
  EXPECT_EQ(interval_checkpoint_index(44, 4, 10), -1);  // entry 10 of 10
  EXPECT_EQ(interval_next_checkpoint(4, 10, 100, 40), kNoCheckpoint);
  EXPECT_EQ(interval_next_checkpoint(4, 10, 100, 39), 40);
  EXPECT_EQ(interval_next_checkpoint(4, 10, 7, -1), 4);
  EXPECT_EQ(interval_next_checkpoint(4, 10, 7, 4), kNoCheckpoint);
}

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
