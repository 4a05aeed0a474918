// workloads.cpp: definitions of the named workloads and their floor arithmetic.
#include "common/workloads.h"

#include <algorithm>
#include <cmath>

namespace kda::testing {
namespace {

size_t bytes_of(kda_dtype_t d) {
  return d == KDA_DTYPE_FLOAT32 || d == KDA_DTYPE_INT32 ? 4 : d == KDA_DTYPE_FLOAT64 || d == KDA_DTYPE_INT64 ? 8 : 2;
}

// The standard prefill workloads: B = 1, 8192 tokens, K = V = 128, bf16, bounded gate (-5), q/k L2 norm and
// beta sigmoid in the kernel, fp32 value-first initial state given and final state returned.
CaseSpec standard(int H, std::vector<int64_t> seqlens) {
  CaseSpec s;
  s.H = s.HV = H;
  s.K = s.V = 128;
  s.B = 1;
  s.T = 8192;
  if (seqlens.size() > 1) s.seqlens = std::move(seqlens);
  return s;
}

CaseSpec kimi(int64_t T, std::vector<int64_t> seqlens = {}) {
  CaseSpec s = standard(32, std::move(seqlens));
  s.T = T;
  s.gate = KDA_GATE_SOFTPLUS;
  return s;
}

std::vector<int64_t> repeat(int n, int64_t len) { return std::vector<int64_t>(static_cast<size_t>(n), len); }

std::vector<Workload> make() {
  const std::vector<int64_t> mixed = {1300, 547, 2048, 963, 271, 3063};
  std::vector<Workload> w = {
      {"h96-fixed", "H=96, one 8192-token sequence", standard(96, {8192})},
      {"h96-mixed", "H=96, 6 packed sequences [1300,547,2048,963,271,3063]", standard(96, mixed)},
      {"h96-uniform", "H=96, 8 x 1024 packed", standard(96, repeat(8, 1024))},
      {"h64-fixed", "H=64, one 8192-token sequence", standard(64, {8192})},
      {"h64-mixed", "H=64, 6 packed sequences [1300,547,2048,963,271,3063]", standard(64, mixed)},
      {"h64-uniform", "H=64, 8 x 1024 packed", standard(64, repeat(8, 1024))},
      // Issue #6's layout checks against the standard ones: mixed moved by one token, and a layout drawn per run.
      {"h96-mixed-shift", "H=96, h96-mixed moved by one token [1299,...,3064]", standard(96, shifted(mixed))},
      {"h64-mixed-shift", "H=64, h64-mixed moved by one token [1299,...,3064]", standard(64, shifted(mixed))},
      {"h96-random", "H=96, 8192 tokens packed in lengths 0..3000 drawn from the run's seed", standard(96, {8192}),
       false, 3000},
      {"h64-random", "H=64, 8192 tokens packed in lengths 0..3000 drawn from the run's seed", standard(64, {8192}),
       false, 3000},
      {"kimi-8k", "Kimi-Linear softplus gate, H=32, one 8192-token sequence", kimi(8192)},
      {"kimi-32k", "Kimi-Linear softplus gate, H=32, one 32768-token sequence", kimi(32768)},
      {"kimi-packed-8k", "Kimi-Linear softplus gate, H=32, 8 x 1024 packed", kimi(0, repeat(8, 1024))},
      {"serve-256x32", "H=64, 256 sequences of 32 tokens", standard(64, repeat(256, 32))},
      {"serve-64x100", "H=64, 64 sequences of 100 tokens (off the chunk grid)", standard(64, repeat(64, 100))},
      {"long-128k", "H=64, one 131072-token sequence", [] { CaseSpec s = standard(64, {}); s.T = 131072; return s; }()},
      {"h4-32k", "H=4 (32 heads at 8-way tensor parallelism), one 32768-token sequence: few chains, long ones",
       [] { CaseSpec s = standard(4, {}); s.T = 32768; return s; }()},
      {"h16-32k", "H=16 (32 heads at 2-way tensor parallelism), one 32768-token sequence: fewer chains than SMs",
       [] { CaseSpec s = standard(16, {}); s.T = 32768; return s; }()},
      {"cpu-8k-h8", "CPU default: H=8, one 8192-token sequence (the CPU backend's throughput figure)",
       [] { CaseSpec s = standard(8, {}); return s; }()},
      {"cpu-32k-h1", "CPU, fewer chains than threads: H=1, one 32768-token sequence",
       [] { CaseSpec s = standard(1, {}); s.T = 32768; return s; }()},
  };
  // Training steps of the six standard workloads (and their layout checks), the CPU default, and the few-head ones
  // (kimi-8k, h16-32k, h4-32k: fewer chains than SMs, where the backward's reverse pass plans its tiles as the
  // forward's state pass does).
  const size_t n = w.size();
  for (size_t i = 0; i < n; ++i) {
    const std::string base = w[i].name;
    const bool few_heads = base == "kimi-8k" || base == "h16-32k" || base == "h4-32k";
    if (base.rfind("h96-", 0) != 0 && base.rfind("h64-", 0) != 0 && base != "cpu-8k-h8" && !few_heads) continue;
    Workload t = w[i];
    t.name = "train-" + base;
    t.description = "forward + backward of " + base;
    t.backward = true;
    w.push_back(t);
  }
  for (Workload& x : w) x.spec.name = x.name;
  return w;
}

}  // namespace

const std::vector<Workload>& workloads() {
  static const std::vector<Workload> w = make();
  return w;
}

CaseSpec workload_spec(const Workload& w, uint64_t seed) {
  CaseSpec s = w.spec;
  if (w.random_layout_max > 0) {
    std::mt19937_64 rng(seed ^ 0x6c61796f75747321ull);  // a stream apart from the inputs' draws from the same seed
    s.seqlens = random_layout(rng, s.T, w.random_layout_max);
  }
  return s;
}

std::vector<int64_t> random_layout(std::mt19937_64& rng, int64_t total, int64_t max_len) {
  std::uniform_int_distribution<int64_t> len(0, max_len);
  std::vector<int64_t> v;
  int64_t acc = 0;
  while (acc < total) {
    const int64_t l = std::min(len(rng), total - acc);
    v.push_back(l);
    acc += l;
  }
  return v;
}

std::vector<int64_t> shifted(std::vector<int64_t> v) {
  v.front() -= 1;
  v.back() += 1;
  return v;
}

const Workload* find_workload(const std::string& name) {
  for (const Workload& w : workloads())
    if (w.name == name) return &w;
  return nullptr;
}

double workload_min_bytes(const Case& c) {
  const CaseSpec& s = c.spec;
  const double tokens = static_cast<double>(s.B * s.T);
  const double in = bytes_of(s.in_dtype);
  double b = tokens * (2.0 * s.H * s.K * in + s.HV * s.V * in + s.HV * s.K * bytes_of(s.g_dtype) +
                       s.HV * bytes_of(s.beta_dtype) + s.HV * s.V * in);
  const double state = static_cast<double>(c.N) * s.HV * s.K * s.V * 4.0;
  if (s.has_h0) b += state;
  if (s.want_final) b += state;
  return b;
}

double workload_flops(const Case& c, int C) {
  const CaseSpec& s = c.spec;
  const double per = 6.0 * C * s.K + 4.0 * C * s.V + 6.0 * s.K * s.V + C * C / 3.0;
  return per * static_cast<double>(s.B * s.T) * s.HV;
}

const std::vector<DecodeWorkload>& decode_workloads() {
  static const std::vector<DecodeWorkload> w = [] {
    std::vector<DecodeWorkload> v;
    for (int H : {32, 12})
      for (int64_t B : {1, 8, 32, 128, 256, 512}) {
        DecodeWorkload d;
        d.name = "decode-h" + std::to_string(H) + "-b" + std::to_string(B);
        d.description = "decode, H=" + std::to_string(H) + ", batch " + std::to_string(B) + ", fp32 value-first pool";
        d.spec.name = d.name;
        d.spec.io.name = d.name;
        d.spec.io.B = B;
        d.spec.io.T = 1;
        d.spec.io.H = d.spec.io.HV = H;
        d.spec.io.K = d.spec.io.V = 128;
        d.spec.slots = B + B / 2 + 1;
        v.push_back(d);
      }
    // bf16 pools (half the state bytes): -bf16, at H = 32, B = 1, 32 and 256; compare with the fp32 workload.
    for (int64_t B : {1, 32, 256}) {
      DecodeWorkload d = v[B == 1 ? 0 : B == 32 ? 2 : 4];
      d.name += "-bf16";
      d.description = "decode, H=32, batch " + std::to_string(B) + ", bf16 value-first pool";
      d.spec.name = d.spec.io.name = d.name;
      d.spec.pool_dtype = KDA_DTYPE_BFLOAT16;
      v.push_back(d);
    }
    // Fusions (same state bytes): -conv the causal short conv of q/k/v with its conv state, -norm the gated RMSNorm
    // of the output, -fused both; compare with the plain workload of the same size (plus the separate kernels).
    for (int64_t B : {1, 8, 32, 256})
      for (const char* f : {"conv", "norm", "fused"}) {
        if (B != 256 && std::string(f) != "fused") continue;
        DecodeWorkload d = v[B == 1 ? 0 : B == 8 ? 1 : B == 32 ? 2 : 4];
        d.name += std::string("-") + f;
        d.description += std::string(", fused ") + (std::string(f) == "conv" ? "short conv" :
                                                    std::string(f) == "norm" ? "gated RMSNorm" : "short conv + gated RMSNorm");
        d.spec.name = d.spec.io.name = d.name;
        d.spec.conv = std::string(f) != "norm";
        d.spec.norm = std::string(f) != "conv";
        v.push_back(d);
      }
    return v;
  }();
  return w;
}

const DecodeWorkload* find_decode_workload(const std::string& name) {
  for (const DecodeWorkload& w : decode_workloads())
    if (w.name == name) return &w;
  return nullptr;
}

double decode_min_bytes(const DecodeCase& d) {
  const CaseSpec& s = d.c.spec;
  const double tokens = static_cast<double>(s.B * s.T);
  const double in = bytes_of(s.in_dtype);
  const double per_token = 2.0 * s.H * s.K * in + s.HV * s.V * in + s.HV * s.K * bytes_of(s.g_dtype) +
                           s.HV * bytes_of(s.beta_dtype) + s.HV * s.V * in;
  return tokens * per_token + 2.0 * static_cast<double>(s.B) * s.HV * s.K * s.V * bytes_of(d.spec.pool_dtype);
}

}  // namespace kda::testing
