// test_cuda_decode.cpp: CUDA decode against the oracle built from the forward reference: the CPU suite's decode
// cases (padding, 1-D and 2-D indices, num_accepted_tokens, layouts, head dims) plus serving sizes (H = 32 and
// 12, batch up to 512); untouched slots bitwise unchanged; the fused conv and gated RMSNorm against the hand-written
// fp64 decode. Skips itself where no GPU is present.
#include <gtest/gtest.h>

#include "common/decode_cases.h"
#include "common/device.h"
#include "gpu/gpu_test.h"

namespace kda::testing {
namespace {

std::vector<DecodeSpec> gpu_decode_cases() {
  std::vector<DecodeSpec> v = decode_cases();
  for (int H : {32, 12})
    for (int64_t B : {1, 37, 512}) {
      DecodeSpec s;
      s.name = "serving_h" + std::to_string(H) + "_b" + std::to_string(B);
      s.io.name = s.name;
      s.io.B = B;
      s.io.T = 1;
      s.io.H = s.io.HV = H;
      s.io.K = s.io.V = 128;
      s.slots = B + 9;
      s.padding = 0.1;
      v.push_back(s);
    }
  {  // a bf16 pool past the row-split kernel's batches: the bulk kernel takes it on sm_90, many tiles per CTA
    DecodeSpec s = v.back();  // serving_h12_b512
    s.name = "serving_h32_b512_bf16_pool";
    s.io.name = s.name;
    s.io.H = s.io.HV = 32;
    s.pool_dtype = KDA_DTYPE_BFLOAT16;
    v.push_back(s);
  }
  DecodeSpec one = v[v.size() - 2];  // serving_h12_b512: spec decoding's 2-D indices with one token each
  one.name = "serving_h12_b512_2d_indices_one_token";
  one.io.name = one.name;
  one.per_token = true;
  one.with_accepted = true;
  v.push_back(one);
  DecodeSpec spec = v.back();
  spec.name = "serving_h32_b64_spec_verify_4_tokens";
  spec.io.H = spec.io.HV = 32;
  spec.io.B = 64;
  spec.io.T = 4;
  spec.per_token = true;
  spec.with_accepted = true;
  spec.slots = 64 * 4 + 3;
  v.push_back(spec);
  {  // V = 16 (a legal head dim under the bulk kernel's 32-row tiles): every tile partial, 16 rows
    DecodeSpec s = v.front();
    s.name = "v16_partial_tile";
    s.io.name = s.name;
    s.io.K = 64;
    s.io.V = 16;
    s.io.B = 37;
    s.slots = 45;
    v.push_back(s);
  }
  return v;
}

class CudaDecode : public GpuTest, public ::testing::WithParamInterface<DecodeSpec> {};

TEST_P(CudaDecode, MatchesReference) {
  const DecodeSpec& s = GetParam();
  const uint64_t seed = run_seed();
  SCOPED_TRACE("case " + s.name + " seed " + std::to_string(seed) + " (replay: KDA_SEED=" + std::to_string(seed) + ")");
  DecodeCase d = make_decode_case(s, seed);
  const DecodeOracle o = decode_oracle(d);
  DeviceDecodeProblem dp(d, KDA_BACKEND_CUDA_GENERIC);
  ASSERT_EQ(dp.run(), KDA_STATUS_SUCCESS) << kda_last_error();
  HostTensor out = make_tensor(d.c.spec.in_dtype, {d.c.spec.B, d.c.spec.T, d.c.spec.HV, d.c.spec.V});
  HostTensor pool = d.pool;
  dp.download(out, pool);
  const DecodeVerdict v = judge_decode(d, o, out, pool, tolerance_for(d.c.spec.in_dtype, ComputeClass::kFp32));
  EXPECT_TRUE(v.pass) << v.summary();
  std::printf("  %-40s %s\n", s.name.c_str(), v.summary().c_str());
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaDecode, ::testing::ValuesIn(gpu_decode_cases()),
                         [](const ::testing::TestParamInfo<DecodeSpec>& i) { return i.param.name; });

// Each CUDA decode path on its own, on every case: the portable kernel (KDA_BACKEND_CUDA_RECURRENT) for every fp32
// pool; the sm_90 bulk-copy kernel (KDA_BACKEND_CUDA_HOPPER, hopper/decode_bulk.cu) where it applies (1-4 tokens per
// sequence, K in {64, 128, 256}, a value-first fp32 or bf16 pool, an sm_90 device); else NOT_SUPPORTED with the pool
// untouched (the portable kernel refuses a bf16 pool; the row-split kernel, which takes small batches, runs under
// CudaDecode). The serving cases run many tiles per persistent CTA, so the bulk kernel's stages are reused many times
// over.
class CudaDecodePaths : public CudaDecode {};

bool bulk_path_applies(const DecodeSpec& s) {
  return cuda_device_cc_major() == 9 && s.io.T >= 1 && s.io.T <= 4 && (s.io.K == 64 || s.io.K == 128 || s.io.K == 256) &&
         s.io.v_first;
}

TEST_P(CudaDecodePaths, EachPathMatchesReference) {
  const DecodeSpec& s = GetParam();
  const uint64_t seed = run_seed();
  SCOPED_TRACE("case " + s.name + " seed " + std::to_string(seed) + " (replay: KDA_SEED=" + std::to_string(seed) + ")");
  for (const kda_backend_t backend : {KDA_BACKEND_CUDA_RECURRENT, KDA_BACKEND_CUDA_HOPPER}) {
    const char* path = backend == KDA_BACKEND_CUDA_HOPPER ? "bulk" : "portable";
    SCOPED_TRACE(path);
    DecodeCase d = make_decode_case(s, seed);
    const DecodeOracle o = decode_oracle(d);
    DeviceDecodeProblem dp(d, backend);
    const kda_status_t st = dp.run();
    HostTensor out = make_tensor(d.c.spec.in_dtype, {d.c.spec.B, d.c.spec.T, d.c.spec.HV, d.c.spec.V});
    HostTensor pool = d.pool;
    const bool bf16_portable = backend == KDA_BACKEND_CUDA_RECURRENT && s.pool_dtype != KDA_DTYPE_FLOAT32;
    if (bf16_portable || (backend == KDA_BACKEND_CUDA_HOPPER && !bulk_path_applies(s))) {
      EXPECT_EQ(st, KDA_STATUS_NOT_SUPPORTED) << kda_last_error();
      EXPECT_NE(std::string(kda_last_error()).find(bf16_portable ? "state_pool" : "KDA_BACKEND_CUDA_HOPPER"),
                std::string::npos)
          << kda_last_error();
      dp.download(out, pool);
      EXPECT_EQ(pool.bytes, d.pool.bytes) << "a refused call wrote the pool";
      continue;
    }
    ASSERT_EQ(st, KDA_STATUS_SUCCESS) << kda_last_error();
    dp.download(out, pool);
    const DecodeVerdict v = judge_decode(d, o, out, pool, tolerance_for(d.c.spec.in_dtype, ComputeClass::kFp32));
    EXPECT_TRUE(v.pass) << v.summary();
    std::printf("  %-40s %-8s %s\n", s.name.c_str(), path, v.summary().c_str());
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaDecodePaths, ::testing::ValuesIn(gpu_decode_cases()),
                         [](const ::testing::TestParamInfo<DecodeSpec>& i) { return i.param.name; });

// Two decode steps in one CUDA graph on one pool, in place (each step reads the state the step before wrote): the
// same as two reference steps. A decode kernel that starts beside the kernel before it in the stream (programmatic
// dependent launch) must read nothing, the pool least of all, before that kernel's writes are visible; a step that
// read the pool early would compute from the first step's input state. Both the dispatcher's path and the bulk kernel
// forced.
class CudaDecodeGraph : public GpuTest {};
TEST_F(CudaDecodeGraph, TwoStepsInOneGraphEqualTwoReferenceSteps) {
  const uint64_t seed = run_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (replay: KDA_SEED=" + std::to_string(seed) + ")");
  DecodeSpec s;
  for (const DecodeSpec& c : gpu_decode_cases())
    if (c.name == "serving_h12_b37") s = c;
  ASSERT_EQ(s.name, "serving_h12_b37");
  for (const kda_backend_t backend : {KDA_BACKEND_CUDA_GENERIC, KDA_BACKEND_CUDA_HOPPER}) {
    if (backend == KDA_BACKEND_CUDA_HOPPER && !bulk_path_applies(s)) continue;
    SCOPED_TRACE(backend == KDA_BACKEND_CUDA_HOPPER ? "bulk" : "dispatcher");
    DecodeCase d = make_decode_case(s, seed);
    const DecodeOracle first = decode_oracle(d);
    DecodeCase d2 = d;  // the second step: the same inputs on the pool the first step left
    for (int64_t i = 0; i < d2.pool.numel(); ++i) d2.pool.set(i, first.pool[static_cast<size_t>(i)]);
    const DecodeOracle second = decode_oracle(d2);
    DeviceDecodeProblem dp(d, backend);
    TimingStats t;
    ASSERT_TRUE(time_calls({&dp, &dp}, 0, 1, &t)) << kda_last_error();  // one replay of a graph of two steps
    HostTensor out = make_tensor(d.c.spec.in_dtype, {d.c.spec.B, d.c.spec.T, d.c.spec.HV, d.c.spec.V});
    HostTensor pool = d.pool;
    dp.download(out, pool);
    const DecodeVerdict v = judge_decode(d2, second, out, pool, tolerance_for(d.c.spec.in_dtype, ComputeClass::kFp32));
    EXPECT_TRUE(v.pass) << v.summary();
    std::printf("  two steps in one graph, %s: %s\n", backend == KDA_BACKEND_CUDA_HOPPER ? "bulk" : "dispatcher",
                v.summary().c_str());
  }
}

// Fusions (conv of q/k/v with its conv state, gated RMSNorm; decode_fusions.cu): against the hand-written fp64 decode
// of tests/cpu/test_decode.cpp (decode_fused_oracle), the conv states written exactly (copies of inputs) and
// untouched slots bitwise unchanged; plus serving sizes with both fusions.
std::vector<DecodeSpec> gpu_fused_cases() {
  std::vector<DecodeSpec> v = fused_decode_cases();
  for (int64_t B : {1, 256}) {
    DecodeSpec s = v[3];  // both fusions, K = V = 128
    s.name = "fused_both_serving_h32_b" + std::to_string(B);
    s.io.name = s.name;
    s.io.B = B;
    s.io.H = s.io.HV = 32;
    s.slots = B + 7;
    s.padding = 0.1;
    v.push_back(s);
  }
  return v;
}

class CudaFusedDecode : public CudaDecode {};

TEST_P(CudaFusedDecode, MatchesHandComputation) {
  const DecodeSpec& s = GetParam();
  const uint64_t seed = run_seed();
  SCOPED_TRACE("case " + s.name + " seed " + std::to_string(seed) + " (replay: KDA_SEED=" + std::to_string(seed) + ")");
  DecodeCase d = make_decode_case(s, seed);
  const FusedDecodeOracle o = decode_fused_oracle(d);
  DeviceDecodeProblem dp(d, KDA_BACKEND_CUDA_GENERIC);
  ASSERT_EQ(dp.run(), KDA_STATUS_SUCCESS) << kda_last_error();
  HostTensor out = make_tensor(d.c.spec.in_dtype, {d.c.spec.B, d.c.spec.T, d.c.spec.HV, d.c.spec.V});
  HostTensor pool = d.pool;
  HostTensor conv[3] = {d.conv_state[0], d.conv_state[1], d.conv_state[2]};
  dp.download(out, pool);
  dp.download_conv(conv);
  const DecodeVerdict v =
      judge_fused_decode(d, o, out, pool, conv, tolerance_for(d.c.spec.in_dtype, ComputeClass::kFp32));
  EXPECT_TRUE(v.pass) << v.summary();
  std::printf("  %-40s %s\n", s.name.c_str(), v.summary().c_str());
}

// Too small a workspace is refused by name.
class CudaFusedDecodeWorkspace : public GpuTest {};
TEST_F(CudaFusedDecodeWorkspace, TooSmallIsRefused) {
  DecodeCase d = make_decode_case(fused_decode_cases()[3], run_seed());
  DeviceDecodeProblem dp(d, KDA_BACKEND_CUDA_GENERIC);
  size_t need = 0;
  ASSERT_EQ(kda_decode_workspace_size(&dp.args, &need), KDA_STATUS_SUCCESS) << kda_last_error();
  EXPECT_GT(need, size_t{0});
  EXPECT_EQ(kda_decode(&dp.args, nullptr, need - 1, nullptr), KDA_STATUS_WORKSPACE_TOO_SMALL);
  EXPECT_NE(std::string(kda_last_error()).find("workspace_bytes"), std::string::npos) << kda_last_error();
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaFusedDecode, ::testing::ValuesIn(gpu_fused_cases()),
                         [](const ::testing::TestParamInfo<DecodeSpec>& i) { return i.param.name; });

}  // namespace
}  // namespace kda::testing
