// test_validation.cpp: every kind of bad argument returns a status whose message names the argument and says
// what was expected; nothing is computed and no output is touched.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>

#include "common/cases.h"

namespace kda::testing {
namespace {

struct Fixture {
  Case c;
  Outputs o;
  kda_forward_args_t a;
  explicit Fixture(CaseSpec s = {}) {
    s.name = "validation";
    s.T = 8;
    c = make_case(s, 7);
    o = make_outputs(c, s.in_dtype, KDA_DTYPE_FLOAT32);
    a = host_args(c, o, KDA_BACKEND_AUTO);
  }
};

void expect_error(const std::function<void(Fixture&)>& mutate, kda_status_t code, const std::string& arg,
                  const std::string& phrase, CaseSpec spec = {}) {
  Fixture f(spec);
  mutate(f);
  const std::vector<uint8_t> before = f.o.out.bytes;
  EXPECT_EQ(kda_forward(&f.a, nullptr, 0, nullptr), code) << kda_last_error();
  const std::string msg = kda_last_error();
  EXPECT_NE(msg.find(arg + ":"), std::string::npos) << "message does not name '" << arg << "': " << msg;
  EXPECT_NE(msg.find(phrase), std::string::npos) << "message lacks '" << phrase << "': " << msg;
  EXPECT_EQ(f.o.out.bytes, before) << "out was written by a failing call";
  size_t ws = 0;
  EXPECT_EQ(kda_forward_workspace_size(&f.a, &ws), code) << "workspace query disagrees";
}

TEST(Validation, ValidArgumentsSucceed) {
  Fixture f;
  EXPECT_EQ(kda_forward(&f.a, nullptr, 0, nullptr), KDA_STATUS_SUCCESS) << kda_last_error();
  EXPECT_STREQ(kda_last_error(), "");
  size_t ws = 123;
  EXPECT_EQ(kda_forward_workspace_size(&f.a, &ws), KDA_STATUS_SUCCESS);
  EXPECT_EQ(ws, 0u);
}

TEST(Validation, NullArgs) {
  EXPECT_EQ(kda_forward(nullptr, nullptr, 0, nullptr), KDA_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kda_last_error()).find("args:"), std::string::npos);
}

TEST(Validation, WrongRank) {
  expect_error([](Fixture& f) { f.a.q.ndim = 3; }, KDA_STATUS_INVALID_ARGUMENT, "q", "expected rank 4");
  expect_error([](Fixture& f) { f.a.beta.ndim = 4; f.a.beta.shape[3] = 1; f.a.beta.strides[3] = 1; },
               KDA_STATUS_INVALID_ARGUMENT, "beta", "expected rank 3");
  expect_error([](Fixture& f) { f.a.v.ndim = 3; }, KDA_STATUS_INVALID_ARGUMENT, "v", "expected shape [B, T, HV, V]");
}

TEST(Validation, WrongShape) {
  expect_error([](Fixture& f) { f.a.k.shape[1] -= 1; }, KDA_STATUS_INVALID_ARGUMENT, "k", "expected shape");
  expect_error([](Fixture& f) { f.a.g.shape[3] = 32; }, KDA_STATUS_INVALID_ARGUMENT, "g", "expected shape");
  expect_error([](Fixture& f) { f.a.out.shape[2] += 1; }, KDA_STATUS_INVALID_ARGUMENT, "out", "expected shape");
  expect_error([](Fixture& f) { f.a.initial_state.shape[0] = 5; }, KDA_STATUS_INVALID_ARGUMENT, "initial_state",
               "layout [N, HV, V, K]");
  expect_error([](Fixture& f) { f.a.final_state.shape[2] = 16; }, KDA_STATUS_INVALID_ARGUMENT, "final_state",
               "expected shape");
  expect_error([](Fixture& f) { f.a.dt_bias.shape[1] = 3; }, KDA_STATUS_INVALID_ARGUMENT, "dt_bias", "expected shape");
  expect_error([](Fixture& f) { f.a.A_log.shape[0] = 3; }, KDA_STATUS_INVALID_ARGUMENT, "A_log", "expected shape");
}

TEST(Validation, WrongDtype) {
  expect_error([](Fixture& f) { f.a.k.dtype = KDA_DTYPE_FLOAT16; }, KDA_STATUS_INVALID_ARGUMENT, "k", "dtype float16");
  expect_error([](Fixture& f) { f.a.q.dtype = KDA_DTYPE_INT32; f.a.k.dtype = KDA_DTYPE_INT32; },
               KDA_STATUS_INVALID_ARGUMENT, "q", "is not allowed");
  expect_error([](Fixture& f) { f.a.initial_state.dtype = KDA_DTYPE_BFLOAT16; }, KDA_STATUS_INVALID_ARGUMENT,
               "initial_state", "expected float32");
  expect_error([](Fixture& f) { f.a.out.dtype = KDA_DTYPE_FLOAT32; }, KDA_STATUS_INVALID_ARGUMENT, "out",
               "expected bfloat16");
  expect_error([](Fixture& f) { f.a.cu_seqlens.dtype = KDA_DTYPE_FLOAT32; }, KDA_STATUS_INVALID_ARGUMENT,
               "cu_seqlens", "expected int32 or int64", [] { CaseSpec s; s.seqlens = {3, 5}; return s; }());
  expect_error([](Fixture& f) { f.a.A_log.dtype = KDA_DTYPE_BFLOAT16; }, KDA_STATUS_INVALID_ARGUMENT, "A_log",
               "expected float32");
}

TEST(Validation, WrongDevice) {
  expect_error([](Fixture& f) { f.a.v.device_type = KDA_DEVICE_CUDA; }, KDA_STATUS_INVALID_ARGUMENT, "v",
               "all tensors must be on one device");
  expect_error([](Fixture& f) { f.a.final_state.device_type = KDA_DEVICE_CUDA; }, KDA_STATUS_INVALID_ARGUMENT,
               "final_state", "on device cuda:0");
  expect_error([](Fixture& f) { f.a.backend = KDA_BACKEND_CUDA_GENERIC; }, KDA_STATUS_INVALID_ARGUMENT, "backend",
               "needs CUDA tensors");
}

TEST(Validation, StridesAndPointers) {
  expect_error([](Fixture& f) { f.a.q.strides[3] = -1; }, KDA_STATUS_INVALID_ARGUMENT, "q", "negative stride");
  expect_error([](Fixture& f) { f.a.v.data = nullptr; }, KDA_STATUS_INVALID_ARGUMENT, "v", "data is NULL");
  expect_error([](Fixture& f) { f.a.out = kda_tensor_none(); }, KDA_STATUS_INVALID_ARGUMENT, "out",
               "required tensor is absent");
}

TEST(Validation, CuSeqlens) {
  CaseSpec packed;
  packed.seqlens = {3, 5};
  expect_error([](Fixture& f) { f.c.cu_seqlens.set(0, 1); }, KDA_STATUS_INVALID_ARGUMENT, "cu_seqlens",
               "must start at 0", packed);
  expect_error([](Fixture& f) { f.c.cu_seqlens.set(1, 9); }, KDA_STATUS_INVALID_ARGUMENT, "cu_seqlens",
               "non-decreasing", packed);
  expect_error([](Fixture& f) { f.c.cu_seqlens.set(2, 7); }, KDA_STATUS_INVALID_ARGUMENT, "cu_seqlens",
               "must end at T = 8", packed);
  CaseSpec batch2;
  batch2.B = 2;
  static HostTensor cu = [] {
    HostTensor t = make_tensor(KDA_DTYPE_INT32, {3});
    t.set(1, 4);
    t.set(2, 8);
    return t;
  }();
  expect_error([](Fixture& f) { f.a.cu_seqlens = cu.view(); }, KDA_STATUS_INVALID_ARGUMENT, "cu_seqlens",
               "requires B == 1", batch2);
}

TEST(Validation, Heads) {
  CaseSpec s;
  s.H = 2;
  s.HV = 4;
  expect_error([](Fixture& f) { f.a.v.shape[2] = 3; }, KDA_STATUS_INVALID_ARGUMENT, "v",
               "must be a positive multiple of the q/k heads H = 2", s);
}

TEST(Validation, UnsupportedHeadDims) {
  expect_error([](Fixture& f) { f.a.q.shape[3] = f.a.k.shape[3] = 100; }, KDA_STATUS_NOT_SUPPORTED, "q",
               "head dim K = 100 is not supported");
  expect_error([](Fixture& f) { f.a.v.shape[3] = 512; }, KDA_STATUS_NOT_SUPPORTED, "v",
               "head dim V = 512 is not supported");
}

TEST(Validation, GateParameters) {
  CaseSpec softplus;
  softplus.gate = KDA_GATE_SOFTPLUS;
  expect_error([](Fixture& f) { f.a.A_log = kda_tensor_none(); }, KDA_STATUS_INVALID_ARGUMENT, "A_log",
               "required by the softplus gate", softplus);
  expect_error([](Fixture& f) { f.a.dt_bias = kda_tensor_none(); }, KDA_STATUS_INVALID_ARGUMENT, "dt_bias",
               "required by the softplus gate", softplus);
  expect_error([](Fixture& f) { f.a.dt_bias = kda_tensor_none(); }, KDA_STATUS_INVALID_ARGUMENT, "dt_bias",
               "required by the bounded gate");
  expect_error([](Fixture& f) { f.a.lower_bound = 0.5f; }, KDA_STATUS_INVALID_ARGUMENT, "lower_bound",
               "finite lower_bound < 0");
  expect_error([](Fixture& f) { f.a.lower_bound = -std::numeric_limits<float>::infinity(); },
               KDA_STATUS_INVALID_ARGUMENT, "lower_bound", "finite lower_bound < 0");
  expect_error([](Fixture& f) { f.a.gate_mode = KDA_GATE_LOG_DECAY; }, KDA_STATUS_INVALID_ARGUMENT, "A_log",
               "gate_mode is KDA_GATE_LOG_DECAY");
  expect_error([](Fixture& f) { f.a.gate_mode = static_cast<kda_gate_mode_t>(9); }, KDA_STATUS_INVALID_ARGUMENT,
               "gate_mode", "unknown value 9");
}

TEST(Validation, ScaleAndOptions) {
  expect_error([](Fixture& f) { f.a.use_default_scale = 0; f.a.scale = std::numeric_limits<float>::quiet_NaN(); },
               KDA_STATUS_INVALID_ARGUMENT, "scale", "must be finite");
  expect_error([](Fixture& f) { f.a.use_default_scale = 0; f.a.scale = std::numeric_limits<float>::infinity(); },
               KDA_STATUS_INVALID_ARGUMENT, "scale", "must be finite");
  expect_error([](Fixture& f) { f.a.allow_neg_eigval = 1; f.a.beta_is_logits = 0; }, KDA_STATUS_INVALID_ARGUMENT,
               "allow_neg_eigval", "requires beta_is_logits = 1");
  expect_error([](Fixture& f) { f.a.chunk_size = 48; }, KDA_STATUS_INVALID_ARGUMENT, "chunk_size",
               "16, 32 or 64");
  expect_error([](Fixture& f) { f.a.cpu_threads = -2; }, KDA_STATUS_INVALID_ARGUMENT, "cpu_threads", ">= 0");
  expect_error([](Fixture& f) { f.a.backend = KDA_BACKEND_CUDA_HOPPER; }, KDA_STATUS_INVALID_ARGUMENT, "backend",
               "KDA_BACKEND_CUDA_HOPPER needs CUDA tensors");
  expect_error([](Fixture& f) { f.a.save_for_backward = 2; }, KDA_STATUS_INVALID_ARGUMENT, "save_for_backward",
               "0 or 1");
  // Only the chunked CUDA forward keeps tensors for the backward: CPU tensors are refused, by name.
  expect_error([](Fixture& f) { f.a.save_for_backward = 1; }, KDA_STATUS_NOT_SUPPORTED, "save_for_backward",
               "only the chunked CUDA forward");
}

TEST(Validation, ReferenceTakesFp64Outputs) {
  // fp64 out is for the oracle only; the CPU backend must refuse it.
  CaseSpec s;
  Case c = make_case(s, 3);
  Outputs o = make_outputs(c, KDA_DTYPE_FLOAT64, KDA_DTYPE_FLOAT64);
  kda_forward_args_t a = host_args(c, o, KDA_BACKEND_REFERENCE);
  EXPECT_EQ(kda_forward(&a, nullptr, 0, nullptr), KDA_STATUS_SUCCESS) << kda_last_error();
  a.backend = KDA_BACKEND_CPU;
  EXPECT_EQ(kda_forward(&a, nullptr, 0, nullptr), KDA_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kda_last_error()).find("final_state:"), std::string::npos) << kda_last_error();
}

}  // namespace
}  // namespace kda::testing

namespace kda::testing {
namespace {

// Random corruptions of a valid argument set's metadata (ranks, sizes, strides, dtypes, devices, flags, absent
// tensors) never crash the validation and always come back either valid or with a message that starts with the
// status name and names an argument ("name: ..."). Fresh seed each run.
TEST(Validation, RandomCorruptionsGiveNamedErrors) {
  const uint64_t seed = run_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  CaseSpec s;
  s.seqlens = {7, 0, 9};
  s.cu_dtype = KDA_DTYPE_INT64;
  Case c = make_case(s, 9);
  Outputs o = make_outputs(c, s.in_dtype, KDA_DTYPE_FLOAT32);
  // Validation reads host cu_seqlens: back them with room for any size a corruption gives them (< 300 entries),
  // so that a corrupted shape never makes this test itself read past its buffer.
  std::vector<int64_t> cu(1024, 16);
  cu[0] = 0;
  cu[1] = cu[2] = 7;
  int refused = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    kda_forward_args_t a = host_args(c, o, KDA_BACKEND_AUTO);
    a.cu_seqlens.data = cu.data();
    kda_tensor_t* ts[] = {&a.q, &a.k, &a.v, &a.g, &a.beta, &a.A_log, &a.dt_bias, &a.initial_state,
                          &a.cu_seqlens, &a.out, &a.final_state};
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      kda_tensor_t& t = *ts[rng() % 11];
      const int dim = static_cast<int>(rng() % KDA_MAX_DIMS);
      switch (rng() % 9) {
        case 0: t.ndim = static_cast<int32_t>(rng() % 9) - 1; break;
        case 1: t.shape[dim] = static_cast<int64_t>(rng() % 300) - 2; break;
        case 2: t.strides[dim] = static_cast<int64_t>(rng() % 5) - 2; break;
        case 3: t.dtype = static_cast<kda_dtype_t>(rng() % 8); break;
        case 4: t.device_type = static_cast<kda_device_type_t>(rng() % 3); break;
        case 5: t = kda_tensor_none(); break;
        case 6: a.gate_mode = static_cast<kda_gate_mode_t>(rng() % 4); break;
        case 7: a.chunk_size = static_cast<int32_t>(rng() % 80); break;
        default: a.backend = static_cast<kda_backend_t>(rng() % 8); break;
      }
    }
    size_t ws = 0;
    const kda_status_t st = kda_forward_workspace_size(&a, &ws);
    if (st == KDA_STATUS_SUCCESS) continue;
    ++refused;
    const std::string msg = kda_last_error();
    ASSERT_EQ(msg.rfind(kda_status_string(st), 0), 0u) << msg;
    const std::string rest = msg.substr(std::string(kda_status_string(st)).size() + 2);
    const size_t colon = rest.find(": ");
    ASSERT_NE(colon, std::string::npos) << msg;
    ASSERT_GT(colon, 0u) << msg;
    for (size_t i = 0; i < colon; ++i)
      ASSERT_TRUE(std::isalnum(static_cast<unsigned char>(rest[i])) || rest[i] == '_') << "no argument name: " << msg;
  }
  EXPECT_GT(refused, 1000);  // the corruptions are real: most are refused
}

}  // namespace
}  // namespace kda::testing
