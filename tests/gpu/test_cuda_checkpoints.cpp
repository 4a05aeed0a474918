// test_cuda_checkpoints.cpp: prefix-cache state checkpoints on the CUDA token-recurrent forward
// (KDA_BACKEND_CUDA_GENERIC / KDA_BACKEND_CUDA_RECURRENT), against the float64 reference's checkpoints of the same
// call under the fp32 class bound: the CPU suite's layout cases, a packed batch with empty and length-1
// sequences, offsets at every token of short sequences, a large case (T = 8192, H = 8, interval 64 and random
// offsets), and a CUDA graph replayed with new inputs and new offsets. Every checkpoint buffer is NaN-poisoned
// first: each entry whose count lies in [0, len] must be written (a NaN left behind fails compare_state), every
// other entry must keep its NaN bits (kda.h: not written). KDA_BACKEND_CUDA_CHUNKED refuses checkpoints.
// Skips itself where no GPU is present.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "common/cases.h"
#include "common/checkpoint_cases.h"
#include "common/compare.h"
#include "common/device.h"
#include "gpu/gpu_test.h"

namespace kda::testing {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The shared GPU fixture (skips without a device), named for this suite so `*Checkpoint*` selects it.
class GpuCheckpointTest : public GpuTest {};

// Runs case c with checkpoints on the device with backend be (checkpoints NaN-poisoned) and judges every
// checkpoint against the reference's.
void expect_checkpoints_match(Case& c, const HostTensor& offsets, int32_t interval, int64_t n_ckpt,
                              kda_backend_t be) {
  const CaseSpec& s = c.spec;
  HostTensor ref;
  ASSERT_EQ(run_host_checkpoints(c, offsets, interval, n_ckpt, KDA_BACKEND_REFERENCE, &ref), KDA_STATUS_SUCCESS)
      << kda_last_error();
  const HostTensor before = make_checkpoints(c, n_ckpt, KDA_DTYPE_FLOAT32, kNaN);
  HostTensor got = before;
  Outputs outs = make_outputs(c, s.in_dtype, KDA_DTYPE_FLOAT32);
  DeviceProblem dp(c, outs, be);
  dp.set_checkpoints(before, offsets, interval);
  ASSERT_EQ(dp.run(), KDA_STATUS_SUCCESS) << kda_last_error();
  dp.download_checkpoints(got);
  const Tolerance tol = tolerance_for(s.in_dtype, ComputeClass::kFp32, longest_sequence(s));
  const CheckpointVerdict v = judge_checkpoints(c, offsets, interval, n_ckpt, ref, got, before, tol);
  EXPECT_TRUE(v.untouched_error.empty()) << v.untouched_error;
  EXPECT_GT(v.written, 0);
  EXPECT_TRUE(v.stats.pass) << "checkpoints: " << v.stats.summary() << " [" << tol.describe() << "]";
  std::printf("  %-36s %lld checkpoints written, %s\n", s.name.c_str(), static_cast<long long>(v.written),
              v.stats.summary().c_str());
}

struct GpuCkptCase {
  CkptCase c;
  kda_backend_t backend;
};

class CudaCheckpoints : public GpuCheckpointTest, public ::testing::WithParamInterface<GpuCkptCase> {};

// The CPU suite's layout cases (interval and offsets forms, int32 / int64 offsets, both state layouts).
TEST_P(CudaCheckpoints, MatchReference) {
  const CkptCase& k = GetParam().c;
  const CaseSpec s = checkpoint_case_spec(k);
  const uint64_t seed = run_seed();
  SCOPED_TRACE("case " + k.name + " seed " + std::to_string(seed) + " (replay: KDA_SEED=" + std::to_string(seed) + ")");
  Case c = make_case(s, seed);
  std::mt19937_64 rng(seed);
  const int32_t interval = k.offsets ? 0 : kCkptCaseInterval;
  const HostTensor off =
      k.offsets ? random_checkpoint_offsets(c, kCkptCaseEntries, rng, k.offset_dtype) : HostTensor{};
  expect_checkpoints_match(c, off, interval, kCkptCaseEntries, GetParam().backend);
}

std::vector<GpuCkptCase> gpu_checkpoint_cases() {
  std::vector<GpuCkptCase> out;
  for (kda_backend_t be : {KDA_BACKEND_CUDA_GENERIC, KDA_BACKEND_CUDA_RECURRENT})
    for (const CkptCase& k : checkpoint_cases()) out.push_back({k, be});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Layouts, CudaCheckpoints, ::testing::ValuesIn(gpu_checkpoint_cases()),
                         [](const ::testing::TestParamInfo<GpuCkptCase>& i) {
                           return i.param.c.name +
                                  (i.param.backend == KDA_BACKEND_CUDA_GENERIC ? "_generic" : "_recurrent");
                         });

// A packed batch with empty and length-1 sequences, random offsets (0, len, inside, past the end, negative;
// repeats and any order) and the interval form, for every K the kernel takes.
TEST_F(GpuCheckpointTest, PackedEmptyAndLengthOneSequences) {
  for (int K : {16, 32, 64, 128, 256}) {
    CaseSpec s;
    s.name = "ckpt_packed_K" + std::to_string(K);
    s.K = s.V = K;
    s.H = 1;
    s.HV = 2;
    s.seqlens = {0, 1, 37, 0, 1, 70, 16};
    const uint64_t seed = run_seed() + static_cast<uint64_t>(K);
    SCOPED_TRACE("K " + std::to_string(K) + " seed " + std::to_string(seed));
    Case c = make_case(s, seed);
    std::mt19937_64 rng(seed);
    expect_checkpoints_match(c, random_checkpoint_offsets(c, 9, rng, KDA_DTYPE_INT64), 0, 9,
                             KDA_BACKEND_CUDA_GENERIC);
    expect_checkpoints_match(c, HostTensor{}, 16, 6, KDA_BACKEND_CUDA_GENERIC);
    expect_checkpoints_match(c, HostTensor{}, 1, 80, KDA_BACKEND_CUDA_GENERIC);  // every token, past the ends
  }
}

// Offsets at every token count of short sequences: counts 21, 20, .., 0, -1 (decreasing; past the end of all but
// the longest), both layouts and offset dtypes.
TEST_F(GpuCheckpointTest, OffsetsAtEveryToken) {
  for (bool v_first : {true, false}) {
    CaseSpec s;
    s.name = v_first ? "ckpt_every_token" : "ckpt_every_token_k_first";
    s.v_first = v_first;
    s.seqlens = {13, 7, 1, 0, 20};
    const uint64_t seed = run_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    Case c = make_case(s, seed);
    const int64_t n_ckpt = 23;
    HostTensor off = make_tensor(v_first ? KDA_DTYPE_INT32 : KDA_DTYPE_INT64, {c.N, n_ckpt});
    for (int64_t n = 0; n < c.N; ++n)
      for (int64_t j = 0; j < n_ckpt; ++j) off.set(n * n_ckpt + j, static_cast<double>(n_ckpt - 1 - j) - 1.0);
    expect_checkpoints_match(c, off, 0, n_ckpt, KDA_BACKEND_CUDA_GENERIC);
  }
}

// T = 8192, H = 8, K = V = 128: every 64 tokens (the last entry at exactly the sequence's end), then random offsets.
TEST_F(GpuCheckpointTest, LargeSequence) {
  CaseSpec s;
  s.name = "ckpt_large_T8192_H8";
  s.B = 1;
  s.T = 8192;
  s.H = s.HV = 8;
  s.K = s.V = 128;
  const uint64_t seed = run_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Case c = make_case(s, seed);
  expect_checkpoints_match(c, HostTensor{}, 64, 8192 / 64, KDA_BACKEND_CUDA_GENERIC);
  std::mt19937_64 rng(seed);
  HostTensor off = make_tensor(KDA_DTYPE_INT64, {1, 96});
  for (int64_t j = 0; j < 96; ++j) off.set(j, static_cast<double>(std::uniform_int_distribution<int64_t>(-2, 8194)(rng)));
  off.set(0, 0.0);
  off.set(1, 8192.0);
  off.set(2, 4096.0);
  off.set(3, 4096.0);  // a repeated count: both entries are written
  expect_checkpoints_match(c, off, 0, 96, KDA_BACKEND_CUDA_GENERIC);
}

// A graph captured once writes the checkpoints of new inputs, a new packed layout and new offsets at replay
// (offsets and cu_seqlens are read on the device).
TEST_F(GpuCheckpointTest, GraphReplayWithNewInputsAndOffsets) {
  CaseSpec s;
  s.name = "ckpt_graph_replay";
  s.seqlens = {40, 0, 130, 1};
  const uint64_t seed = run_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Case first = make_case(s, seed);
  std::mt19937_64 rng(seed);
  const int64_t n_ckpt = 6;
  const HostTensor off1 = random_checkpoint_offsets(first, n_ckpt, rng, KDA_DTYPE_INT32);
  const HostTensor poison = make_checkpoints(first, n_ckpt, KDA_DTYPE_FLOAT32, kNaN);
  Outputs outs = make_outputs(first, s.in_dtype, KDA_DTYPE_FLOAT32);
  DeviceProblem dp(first, outs, KDA_BACKEND_CUDA_GENERIC);
  dp.set_checkpoints(poison, off1, 0);
  ASSERT_TRUE(dp.capture()) << kda_last_error();
  dp.replay();

  s.seqlens = {1, 100, 70, 0};
  Case second = make_case(s, seed + 1);
  const HostTensor off2 = random_checkpoint_offsets(second, n_ckpt, rng, KDA_DTYPE_INT32);
  dp.replace_inputs(second);
  dp.replace_checkpoints(poison, off2);
  dp.replay();
  HostTensor got = poison;
  dp.download_checkpoints(got);
  HostTensor ref;
  ASSERT_EQ(run_host_checkpoints(second, off2, 0, n_ckpt, KDA_BACKEND_REFERENCE, &ref), KDA_STATUS_SUCCESS)
      << kda_last_error();
  const Tolerance tol = tolerance_for(s.in_dtype, ComputeClass::kFp32, longest_sequence(s));
  const CheckpointVerdict v = judge_checkpoints(second, off2, 0, n_ckpt, ref, got, poison, tol);
  EXPECT_TRUE(v.untouched_error.empty()) << v.untouched_error;
  EXPECT_GT(v.written, 0);
  EXPECT_TRUE(v.stats.pass) << v.stats.summary();
}

// The two-phase chunked path refuses checkpoints with a message naming the argument and the paths that take them.
TEST_F(GpuCheckpointTest, ChunkedRefusesCheckpoints) {
  CaseSpec s;
  s.name = "ckpt_chunked";
  s.seqlens = {64, 32};
  Case c = make_case(s, 5);
  Outputs outs = make_outputs(c, s.in_dtype, KDA_DTYPE_FLOAT32);
  DeviceProblem dp(c, outs, KDA_BACKEND_CUDA_CHUNKED);
  dp.set_checkpoints(make_checkpoints(c, 2, KDA_DTYPE_FLOAT32), HostTensor{}, 16);
  EXPECT_EQ(dp.run(), KDA_STATUS_NOT_SUPPORTED);
  const std::string m = kda_last_error();
  EXPECT_NE(m.find("state_checkpoints:"), std::string::npos) << m;
  EXPECT_NE(m.find("KDA_BACKEND_CUDA_GENERIC"), std::string::npos) << m;
}

}  // namespace
}  // namespace kda::testing
