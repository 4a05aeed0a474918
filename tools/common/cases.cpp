// cases.cpp: generation of case inputs from a seed, and their C-ABI descriptors.
#include "common/cases.h"

#include <cmath>
#include <cstdlib>
#include <numeric>
#include <random>

#include "common/host_access.h"

namespace kda::testing {

namespace {
size_t dtype_size(kda_dtype_t d) {
  switch (d) {
    case KDA_DTYPE_FLOAT16:
    case KDA_DTYPE_BFLOAT16: return 2;
    case KDA_DTYPE_FLOAT32:
    case KDA_DTYPE_INT32: return 4;
    case KDA_DTYPE_FLOAT64:
    case KDA_DTYPE_INT64: return 8;
  }
  return 4;
}
// A generator for one stream of a case: every (tensor, batch, head) draws from its own stream, so streams can be
// filled in parallel and a case is the same for a seed whatever the thread count.
std::mt19937_64 stream_rng(uint64_t seed, uint64_t tensor, uint64_t index) {
  uint64_t z = seed ^ (tensor * 0x9e3779b97f4a7c15ull) ^ (index * 0xbf58476d1ce4e5b9ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;  // splitmix64 finalizer
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return std::mt19937_64(z ^ (z >> 31));
}

// Fills x [B, T, heads, D] with family d at scale std, one stream per (batch, head); rows_zero(t) rows are 0.
template <typename ZeroRow>
void draw_tokens(HostTensor& x, Dist d, double std, uint64_t seed, uint64_t tag, ZeroRow&& rows_zero) {
  const int64_t B = x.shape[0], T = x.shape[1], Hh = x.shape[2], D = x.shape[3];
  constexpr int kRank = 4;
  constexpr double kRho = 0.95;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t bh = 0; bh < B * Hh; ++bh) {
    const int64_t b = bh / Hh, h = bh % Hh;
    std::mt19937_64 rng = stream_rng(seed, tag, static_cast<uint64_t>(bh));
    std::normal_distribution<double> normal(0.0, 1.0);
    std::chi_squared_distribution<double> chi2(3.0);
    std::vector<double> basis(static_cast<size_t>(kRank) * D), prev(static_cast<size_t>(D));
    for (double& e : basis) e = normal(rng) / std::sqrt(double(kRank));
    for (double& e : prev) e = normal(rng);
    for (int64_t t = 0; t < T; ++t) {
      double z[kRank];
      for (double& e : z) e = normal(rng);
      const bool zero = rows_zero(t);
      for (int64_t i = 0; i < D; ++i) {
        double val = 0;
        switch (d) {
          case Dist::kGaussian: val = normal(rng); break;
          case Dist::kHeavyTail: val = normal(rng) / std::sqrt(chi2(rng) / 3.0); break;
          case Dist::kLowRank:
            for (int r = 0; r < kRank; ++r) val += basis[r * D + i] * z[r];
            break;
          case Dist::kCorrelated:
            val = prev[i] = kRho * prev[i] + std::sqrt(1 - kRho * kRho) * normal(rng);
            break;
        }
        x.set(((b * T + t) * Hh + h) * D + i, zero ? 0.0 : std * val);
      }
    }
  }
}

enum StreamTag : uint64_t { kTagQ = 1, kTagK, kTagV, kTagGate, kTagParams, kTagH0, kTagKeyBase };

}  // namespace

const char* dist_name(Dist d) {
  switch (d) {
    case Dist::kGaussian: return "gaussian";
    case Dist::kHeavyTail: return "heavy_tail";
    case Dist::kLowRank: return "low_rank";
    case Dist::kCorrelated: return "correlated";
  }
  return "?";
}

int64_t HostTensor::numel() const {
  if (shape.empty()) return 0;
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<int64_t>());
}
double HostTensor::at(int64_t i) const { return load_element(data(), dtype, i); }
void HostTensor::set(int64_t i, double x) { store_element(data(), dtype, i, x); }

kda_tensor_t HostTensor::view(void* device_ptr, kda_device_type_t dev) const {
  if (!present()) return kda_tensor_none();
  void* p = device_ptr ? device_ptr : const_cast<void*>(data());
  return kda_tensor_contiguous(p, dtype, static_cast<int32_t>(shape.size()), shape.data(), dev, 0);
}

HostTensor make_tensor(kda_dtype_t dtype, std::vector<int64_t> shape) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.bytes.assign(static_cast<size_t>(t.numel()) * dtype_size(dtype), 0);
  return t;
}

Case make_case(const CaseSpec& s, uint64_t seed) {
  Case c;
  c.spec = s;
  c.seed = seed;
  const Recipe& r = s.recipe;

  int64_t B = s.B, T = s.T;
  if (!s.seqlens.empty()) {
    B = 1;
    T = std::accumulate(s.seqlens.begin(), s.seqlens.end(), int64_t{0});
    c.cu_seqlens = make_tensor(s.cu_dtype, {static_cast<int64_t>(s.seqlens.size()) + 1});
    int64_t acc = 0;
    c.cu_seqlens.set(0, 0);
    for (size_t i = 0; i < s.seqlens.size(); ++i) c.cu_seqlens.set(static_cast<int64_t>(i) + 1, acc += s.seqlens[i]);
    c.N = static_cast<int64_t>(s.seqlens.size());
  } else {
    c.N = B;
  }
  c.spec.B = B;
  c.spec.T = T;
  const int H = s.H, HV = s.HV, K = s.K, V = s.V;

  c.q = make_tensor(s.in_dtype, {B, T, H, K});
  c.k = make_tensor(s.in_dtype, {B, T, H, K});
  c.v = make_tensor(s.in_dtype, {B, T, HV, V});
  c.g = make_tensor(s.g_dtype, {B, T, HV, K});
  c.beta = make_tensor(s.beta_dtype, {B, T, HV});

  const double qk_std = r.qk_std >= 0 ? r.qk_std : r.qkv_std;
  draw_tokens(c.q, r.dist, qk_std, seed, kTagQ, [&](int64_t t) { return r.q_zero_rows && t % 7 == 3; });
  if (r.key_jitter >= 0) {
    // One base key per (batch, head); every token's key is that plus a small jitter (near-collinear keys).
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < B * H; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      std::mt19937_64 rng = stream_rng(seed, kTagKeyBase, static_cast<uint64_t>(bh));
      std::normal_distribution<double> normal(0.0, 1.0);
      std::vector<double> base(static_cast<size_t>(K));
      for (double& x : base) x = qk_std * normal(rng);
      for (int64_t t = 0; t < T; ++t)
        for (int kk = 0; kk < K; ++kk)
          c.k.set(((b * T + t) * H + h) * K + kk, base[kk] + r.key_jitter * qk_std * normal(rng));
    }
  } else {
    draw_tokens(c.k, r.dist, qk_std, seed, kTagK, [](int64_t) { return false; });
  }
  draw_tokens(c.v, r.dist, r.qkv_std, seed, kTagV, [](int64_t) { return false; });

  // Per-head parameters: the bimodal channel offsets, A_log, dt_bias.
  std::mt19937_64 prng = stream_rng(seed, kTagParams, 0);
  std::uniform_real_distribution<double> unif(0.0, 1.0);
  std::vector<double> bimodal(static_cast<size_t>(HV) * K, 0.0);
  if (r.g_bimodal > 0)
    for (double& x : bimodal) x = unif(prng) < 0.5 ? r.g_bimodal : -r.g_bimodal;
  if (s.gate != KDA_GATE_LOG_DECAY) {
    if (s.has_A_log || s.gate == KDA_GATE_SOFTPLUS) {
      c.A_log = make_tensor(KDA_DTYPE_FLOAT32, {HV});
      for (int hv = 0; hv < HV; ++hv)
        c.A_log.set(hv, std::isnan(r.A_log_fixed) ? std::log(1.0 + 15.0 * unif(prng)) : r.A_log_fixed);
    }
    c.dt_bias = make_tensor(KDA_DTYPE_FLOAT32, {HV, K});
    for (int64_t i = 0; i < c.dt_bias.numel(); ++i) {
      const double dt = std::exp(std::log(1e-3) + (std::log(0.1) - std::log(1e-3)) * unif(prng));
      c.dt_bias.set(i, std::log(std::expm1(dt)));  // softplus^-1(dt)
    }
  }

  // Gates and betas, one stream per (batch, value head).
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t bh = 0; bh < B * HV; ++bh) {
    const int64_t b = bh / HV;
    const int hv = static_cast<int>(bh % HV);
    std::mt19937_64 rng = stream_rng(seed, kTagGate, static_cast<uint64_t>(bh));
    std::normal_distribution<double> normal(0.0, 1.0);
    std::uniform_real_distribution<double> u01(0.0, 1.0);
    for (int64_t t = 0; t < T; ++t) {
      const int64_t bt = b * T + t;
      const double spike = (r.g_spike_prob > 0 && u01(rng) < r.g_spike_prob) ? r.g_spike : 0.0;
      for (int kk = 0; kk < K; ++kk) {
        double x = r.g_zero ? 0.0 : r.g_mean + r.g_std * normal(rng) + bimodal[hv * K + kk] + spike;
        // The log-decay gate must be <= 0: draw its magnitude.
        if (s.gate == KDA_GATE_LOG_DECAY) x = -std::fabs(x);
        c.g.set((bt * HV + hv) * K + kk, x);
      }
      const double logit = r.beta_mean + r.beta_std * normal(rng);
      // Probabilities when beta is not logits: the drawn logits squashed.
      c.beta.set(bt * HV + hv, s.beta_logits ? logit : 1.0 / (1.0 + std::exp(-logit)));
    }
  }

  if (s.has_h0) {
    c.h0 = make_tensor(KDA_DTYPE_FLOAT32, s.v_first ? std::vector<int64_t>{c.N, HV, V, K}
                                                      : std::vector<int64_t>{c.N, HV, K, V});
    const int64_t per = int64_t{V} * K;
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t nh = 0; nh < c.N * HV; ++nh) {
      std::mt19937_64 rng = stream_rng(seed, kTagH0, static_cast<uint64_t>(nh));
      std::normal_distribution<double> normal(0.0, 1.0);
      for (int64_t i = 0; i < per; ++i) c.h0.set(nh * per + i, r.h0_std * normal(rng));
    }
  }
  return c;
}

Outputs make_outputs(const Case& c, kda_dtype_t out_dtype, kda_dtype_t state_dtype) {
  const CaseSpec& s = c.spec;
  Outputs o;
  o.out = make_tensor(out_dtype, {s.B, s.T, s.HV, s.V});
  // Poison: every element must be written by the implementation.
  for (int64_t i = 0; i < o.out.numel(); ++i) o.out.set(i, std::numeric_limits<double>::quiet_NaN());
  if (s.want_final) {
    o.final_state = make_tensor(state_dtype, s.v_first ? std::vector<int64_t>{c.N, s.HV, s.V, s.K}
                                                       : std::vector<int64_t>{c.N, s.HV, s.K, s.V});
    for (int64_t i = 0; i < o.final_state.numel(); ++i)
      o.final_state.set(i, std::numeric_limits<double>::quiet_NaN());
  }
  return o;
}

kda_forward_args_t host_args(Case& c, Outputs& o, kda_backend_t backend) {
  const CaseSpec& s = c.spec;
  kda_forward_args_t a;
  kda_forward_args_init(&a);
  a.q = c.q.view();
  a.k = c.k.view();
  a.v = c.v.view();
  a.g = c.g.view();
  a.beta = c.beta.view();
  a.A_log = c.A_log.view();
  a.dt_bias = c.dt_bias.view();
  a.initial_state = c.h0.view();
  a.cu_seqlens = c.cu_seqlens.view();
  a.out = o.out.view();
  a.final_state = o.final_state.view();
  set_flags(a, s);
  a.chunk_size = s.chunk_size;
  a.backend = backend;
  return a;
}

uint64_t fresh_seed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

uint64_t run_seed() {
  static const uint64_t seed = [] {
    const char* env = std::getenv("KDA_SEED");
    return env ? std::strtoull(env, nullptr, 0) : fresh_seed();
  }();
  return seed;
}

}  // namespace kda::testing
