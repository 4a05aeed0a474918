// cases.h: test and benchmark problems: a case spec (shapes, layout, features), input recipes (the standard
// workload recipe and hostile variants), host-side generation from a seed, and C-ABI argument assembly.
#pragma once

#include <cstdint>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "kda/kda.h"

namespace kda::testing {

// A host tensor: contiguous bytes of one dtype.
struct HostTensor {
  kda_dtype_t dtype = KDA_DTYPE_FLOAT32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  int64_t numel() const;
  void* data() { return bytes.empty() ? nullptr : bytes.data(); }
  const void* data() const { return bytes.empty() ? nullptr : bytes.data(); }
  double at(int64_t i) const;
  void set(int64_t i, double x);
  bool present() const { return !shape.empty(); }
  // Descriptor over this memory (or over `device_ptr` with the same shape, for a device copy).
  kda_tensor_t view(void* device_ptr = nullptr, kda_device_type_t dev = KDA_DEVICE_CPU) const;
};

HostTensor make_tensor(kda_dtype_t dtype, std::vector<int64_t> shape);

// Families q, k and v are drawn from (so no implementation can specialize to Gaussian data).
enum class Dist {
  kGaussian,    // N(0, std^2)
  kHeavyTail,   // std * Student-t with 3 degrees of freedom
  kLowRank,     // per (batch, head) a random rank-4 subspace: x_t = basis z_t
  kCorrelated,  // AR(1) over tokens, correlation 0.95 between neighbours
};
const char* dist_name(Dist d);

// How inputs are drawn. Defaults are the standard workload recipe of the project's workloads.md.
struct Recipe {
  std::string name = "standard";
  Dist dist = Dist::kGaussian;
  double qkv_std = 0.5;        // q, k, v ~ N(0, qkv_std^2)
  double qk_std = -1.0;        // >= 0: q and k use this instead (e.g. 1e20: sums of squares overflow fp32)
  double g_mean = 0.0, g_std = 0.5;
  double g_bimodal = 0.0;      // > 0: each (head, channel) adds +-g_bimodal once (half dead, half alive)
  bool g_zero = false;         // g exactly 0 (with the log-decay gate: no decay at all)
  double g_spike_prob = 0.0;   // probability a (token, head) gets g += g_spike (single-token huge decays)
  double g_spike = 0.0;
  double A_log_fixed = std::numeric_limits<double>::quiet_NaN();  // NaN: A_log = log U(1, 16)
  double beta_mean = 0.0, beta_std = 0.5;
  double h0_std = 0.25;
  double key_jitter = -1.0;    // >= 0: keys of a sequence are one base key plus jitter * noise
  bool q_zero_rows = false;    // every 7th token has q = 0
};

struct CaseSpec {
  std::string name;
  int64_t B = 1, T = 64;
  std::vector<int64_t> seqlens;  // non-empty: packed batch (B = 1, T = sum)
  kda_dtype_t cu_dtype = KDA_DTYPE_INT32;
  int H = 2, HV = 2, K = 64, V = 64;
  kda_dtype_t in_dtype = KDA_DTYPE_BFLOAT16;
  kda_dtype_t g_dtype = KDA_DTYPE_BFLOAT16, beta_dtype = KDA_DTYPE_BFLOAT16;
  kda_gate_mode_t gate = KDA_GATE_BOUNDED;
  float lower_bound = -5.0f;
  bool has_A_log = true;
  bool l2norm = true, beta_logits = true, neg_eigval = false;
  bool v_first = true, has_h0 = true, want_final = true;
  bool default_scale = true;
  float scale = 1.0f;
  int chunk_size = 0;
  Recipe recipe;
};

// The unbounded softplus gate with A_log fixed, g ~ N(g_mean, g_std^2), and a +spike added to every channel of a
// (token, head) with probability spike_prob: the spiked hostile gates of the correctness suite and the stress probes.
inline void softplus_spikes(CaseSpec& s, double a_log, double g_mean, double g_std, double spike_prob, double spike) {
  s.gate = KDA_GATE_SOFTPLUS;
  s.recipe.A_log_fixed = a_log;
  s.recipe.g_mean = g_mean;
  s.recipe.g_std = g_std;
  s.recipe.g_spike_prob = spike_prob;
  s.recipe.g_spike = spike;
}

// gtest prints a case by its name.
inline void PrintTo(const CaseSpec& s, std::ostream* os) { *os << s.name; }

// The inputs of one case, drawn from a seed (and rounded to their dtypes: the reference sees the same values).
struct Case {
  CaseSpec spec;
  uint64_t seed = 0;
  int64_t N = 0;
  HostTensor q, k, v, g, beta, A_log, dt_bias, h0, cu_seqlens;
};

Case make_case(const CaseSpec& spec, uint64_t seed);

// Output buffers for a case: out [B, T, HV, V] of out_dtype and (if wanted) final state of state_dtype.
struct Outputs {
  HostTensor out, final_state;
};
Outputs make_outputs(const Case& c, kda_dtype_t out_dtype, kda_dtype_t state_dtype);

// The operator flags of a spec (scale, gate, lower bound, norms, beta, state layout) on forward or decode args.
template <typename Args>
void set_flags(Args& a, const CaseSpec& s) {
  a.use_default_scale = s.default_scale ? 1 : 0;
  a.scale = s.scale;
  a.gate_mode = s.gate;
  a.lower_bound = s.lower_bound;
  a.use_qk_l2norm = s.l2norm;
  a.beta_is_logits = s.beta_logits;
  a.allow_neg_eigval = s.neg_eigval;
  a.state_v_first = s.v_first;
}

// Fills args for the case over host memory.
kda_forward_args_t host_args(Case& c, Outputs& o, kda_backend_t backend);

// A fresh seed (from std::random_device), printed by callers so any failure can be replayed.
uint64_t fresh_seed();

// Seed for this run: $KDA_SEED if set (replay), else fresh_seed().
uint64_t run_seed();

}  // namespace kda::testing
