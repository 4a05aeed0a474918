// decode_cases.cpp: decode problems, their oracle and checks (decode_cases.h).
#include "common/decode_cases.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>

namespace kda::testing {

DecodeCase make_decode_case(const DecodeSpec& s, uint64_t seed) {
  DecodeCase d;
  d.spec = s;
  CaseSpec io = s.io;
  io.has_h0 = false;
  io.want_final = false;
  io.seqlens.clear();
  d.c = make_case(io, seed);
  const int64_t N = io.B, T = io.T;
  std::mt19937_64 rng(seed ^ 0xdec0de);
  std::normal_distribution<double> normal(0.0, 1.0);
  d.pool = make_tensor(s.pool_dtype, io.v_first ? std::vector<int64_t>{s.slots, io.HV, io.V, io.K}
                                                : std::vector<int64_t>{s.slots, io.HV, io.K, io.V});
  {
    // The pool (273 M floats at H = 32, B = 512): blocks of 2^20 values, each from a generator of its own seeded by
    // (seed, block), filled in parallel. One generator draws them in 6-10 s on one core of the development machine,
    // a large part of the ~27 s each such case took in the H200's test runs.
    constexpr int64_t kBlock = int64_t{1} << 20;
    const bool f32 = s.pool_dtype == KDA_DTYPE_FLOAT32;
    float* const pool = f32 ? static_cast<float*>(d.pool.data()) : nullptr;
    HostTensor& pool_t = d.pool;
    const int64_t numel = d.pool.numel(), blocks = (numel + kBlock - 1) / kBlock;
    const double h0_std = io.recipe.h0_std;
#pragma omp parallel for schedule(dynamic)
    for (int64_t b = 0; b < blocks; ++b) {
      std::mt19937_64 r(seed ^ 0xdec0de ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(b + 1)));
      std::normal_distribution<double> nd(0.0, 1.0);
      const int64_t end = std::min(numel, (b + 1) * kBlock);
      for (int64_t i = b * kBlock; i < end; ++i) {
        const float x = static_cast<float>(h0_std * nd(r));
        if (f32)
          pool[i] = x;
        else
          pool_t.set(i, x);  // rounded to the pool's dtype
      }
    }
  }
  // Distinct slots for every (sequence, token) from a shuffled pool, some sequences padding.
  std::vector<int32_t> perm(static_cast<size_t>(s.slots));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  const int64_t per_seq = s.per_token ? T : 1;
  if (N * per_seq > s.slots) {
    throw std::invalid_argument("decode case " + s.name + ": " + std::to_string(s.slots) + " slots are too few");
  }
  d.indices = make_tensor(KDA_DTYPE_INT32, s.per_token ? std::vector<int64_t>{N, T} : std::vector<int64_t>{N});
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  for (int64_t n = 0; n < N; ++n) {
    const bool pad = u01(rng) < s.padding;
    for (int64_t t = 0; t < per_seq; ++t) d.indices.set(n * per_seq + t, pad ? -1 : perm[n * per_seq + t]);
  }
  if (s.with_accepted) {
    d.num_accepted = make_tensor(KDA_DTYPE_INT32, {N});
    std::uniform_int_distribution<int64_t> acc(1, T);
    for (int64_t n = 0; n < N; ++n) d.num_accepted.set(n, static_cast<double>(acc(rng)));
  }
  if (s.conv) {
    const int64_t dims[3] = {int64_t{io.H} * io.K, int64_t{io.H} * io.K, int64_t{io.HV} * io.V};
    for (int i = 0; i < 3; ++i) {
      d.conv_w[i] = make_tensor(KDA_DTYPE_FLOAT32, {dims[i], 4});
      for (int64_t j = 0; j < d.conv_w[i].numel(); ++j) d.conv_w[i].set(j, 0.5 * normal(rng));
      d.conv_state[i] = make_tensor(io.in_dtype, {s.slots, dims[i], 3});
      for (int64_t j = 0; j < d.conv_state[i].numel(); ++j) d.conv_state[i].set(j, normal(rng));
    }
  }
  if (s.norm) {
    d.norm_w = make_tensor(KDA_DTYPE_FLOAT32, {io.V});
    for (int64_t j = 0; j < io.V; ++j) d.norm_w.set(j, 1.0 + 0.3 * normal(rng));
    d.out_gate = make_tensor(io.in_dtype, {N, T, io.HV, io.V});
    for (int64_t j = 0; j < d.out_gate.numel(); ++j) d.out_gate.set(j, 2.0 * normal(rng));
  }
  return d;
}

kda_decode_args_t decode_host_args(DecodeCase& d, HostTensor& out, HostTensor& pool, kda_backend_t backend) {
  const CaseSpec& s = d.c.spec;
  kda_decode_args_t a;
  kda_decode_args_init(&a);
  a.q = d.c.q.view();
  a.k = d.c.k.view();
  a.v = d.c.v.view();
  a.g = d.c.g.view();
  a.beta = d.c.beta.view();
  a.A_log = d.c.A_log.view();
  a.dt_bias = d.c.dt_bias.view();
  a.state_pool = pool.view();
  a.state_indices = d.indices.view();
  a.num_accepted_tokens = d.num_accepted.view();
  a.out = out.view();
  set_flags(a, s);
  a.backend = backend;
  if (d.spec.conv) {
    a.q_conv_weight = d.conv_w[0].view();
    a.k_conv_weight = d.conv_w[1].view();
    a.v_conv_weight = d.conv_w[2].view();
    a.q_conv_state = d.conv_state[0].view();
    a.k_conv_state = d.conv_state[1].view();
    a.v_conv_state = d.conv_state[2].view();
  }
  if (d.spec.norm) {
    a.out_norm_weight = d.norm_w.view();
    a.out_gate = d.out_gate.view();
    a.out_norm_eps = d.spec.norm_eps;
    a.out_gate_activation = d.spec.norm_act;
  }
  return a;
}

namespace {
// The start slot and per-token write slots of sequence n (the documented semantics, written out again).
int64_t start_slot(const DecodeCase& d, int64_t n) {
  const int64_t T = d.c.spec.T;
  int64_t s;
  if (!d.spec.per_token) {
    s = static_cast<int64_t>(d.indices.at(n));
  } else {
    const int64_t a = d.num_accepted.present() ? static_cast<int64_t>(d.num_accepted.at(n)) : 1;
    if (a < 1 || a > T) return -1;
    s = static_cast<int64_t>(d.indices.at(n * T + a - 1));
  }
  return s < d.spec.slots ? s : -1;
}
int64_t token_slot(const DecodeCase& d, int64_t n, int64_t t) {
  const int64_t T = d.c.spec.T;
  int64_t s = d.spec.per_token ? static_cast<int64_t>(d.indices.at(n * T + t))
                               : (t == T - 1 ? static_cast<int64_t>(d.indices.at(n)) : -1);
  return s < d.spec.slots ? s : -1;
}

// The oracle's pool starts as the case's (fp32 -> double, in parallel: serving pools hold ~300 M values); nothing
// written yet.
void copy_pool(const DecodeCase& d, DecodeOracle& o) {
  const int64_t numel = d.pool.numel();
  const float* const src = d.pool.dtype == KDA_DTYPE_FLOAT32 ? static_cast<const float*>(d.pool.data()) : nullptr;
  o.pool.resize(static_cast<size_t>(numel));
#pragma omp parallel for
  for (int64_t i = 0; i < numel; ++i) o.pool[i] = src ? src[i] : d.pool.at(i);
  o.written.assign(o.pool.size(), false);
}
}  // namespace

DecodeOracle decode_oracle(const DecodeCase& d) {
  const CaseSpec& s = d.c.spec;
  const int64_t N = s.B, T = s.T, per = d.pool.numel() / d.spec.slots;
  DecodeOracle o;
  copy_pool(d, o);
  // Every prefix length t + 1 as a forward with h0 gathered from the start slots (zeros for padding).
  for (int64_t len = T; len >= 1; --len) {
    Case f = d.c;
    f.spec.T = len;
    f.spec.has_h0 = true;
    f.spec.want_final = true;
    auto cut = [&](HostTensor& x) {  // keep the first len tokens of every sequence
      const int64_t row = x.numel() / (N * T);
      std::vector<int64_t> shape = x.shape;
      shape[1] = len;
      HostTensor y = make_tensor(x.dtype, shape);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < len * row; ++i) y.set(n * len * row + i, x.at(n * T * row + i));
      x = std::move(y);
    };
    cut(f.q); cut(f.k); cut(f.v); cut(f.g); cut(f.beta);
    f.h0 = make_tensor(KDA_DTYPE_FLOAT32, {N, d.pool.shape[1], d.pool.shape[2], d.pool.shape[3]});
    for (int64_t n = 0; n < N; ++n) {
      const int64_t slot = start_slot(d, n);
      for (int64_t i = 0; i < per; ++i) f.h0.set(n * per + i, slot >= 0 ? d.pool.at(slot * per + i) : 0.0);
    }
    Oracle fo = run_oracle(f);
    if (len == T) {
      o.out.out = std::move(fo.out);
      o.out.out_mag = std::move(fo.out_mag);
    }
    for (int64_t n = 0; n < N; ++n) {
      if (start_slot(d, n) < 0) continue;
      const int64_t w = token_slot(d, n, len - 1);
      if (w < 0) continue;
      for (int64_t i = 0; i < per; ++i) {
        o.pool[w * per + i] = fo.final_state.at(n * per + i);
        o.written[w * per + i] = true;
      }
    }
  }
  // Padding sequences: outputs exactly zero.
  const int64_t out_per_seq = o.out.out.numel() / N;
  for (int64_t n = 0; n < N; ++n)
    if (start_slot(d, n) < 0)
      for (int64_t i = 0; i < out_per_seq; ++i) {
        o.out.out.set(n * out_per_seq + i, 0.0);
        o.out.out_mag[n * out_per_seq + i] = 0.0;
      }
  return o;
}

std::string DecodeVerdict::summary() const {
  char buf[512];
  std::snprintf(buf, sizeof buf, "%s out: %s | pool: %s | untouched changed: %lld | conv wrong: %lld",
                pass ? "PASS" : "FAIL", out.summary().c_str(), pool.summary().c_str(),
                static_cast<long long>(untouched_changed), static_cast<long long>(conv_wrong));
  return buf;
}

DecodeVerdict judge_decode(const DecodeCase& d, const DecodeOracle& o, const HostTensor& out, const HostTensor& pool,
                           const Tolerance& tol) {
  DecodeVerdict v;
  v.out = compare_out(out, o.out, tol);
  // Written slots against the oracle (state rules); the rest must be the given bits.
  const int64_t per = pool.numel() / d.spec.slots;
  // got keeps the pool's dtype, so compare_state allows a bf16 pool its one rounding of each written state.
  HostTensor got = make_tensor(pool.dtype, {pool.numel()});
  Oracle ref;
  ref.final_state = make_tensor(KDA_DTYPE_FLOAT64, {pool.numel()});
  const size_t esize = pool.bytes.size() / static_cast<size_t>(pool.numel());
  const uint8_t* const now = static_cast<const uint8_t*>(pool.data());
  const uint8_t* const before = static_cast<const uint8_t*>(d.pool.data());
  uint8_t* const got_b = static_cast<uint8_t*>(got.data());
  double* const ref_f = static_cast<double*>(ref.final_state.data());
  int64_t changed = 0;
#pragma omp parallel for reduction(+ : changed)
  for (int64_t i = 0; i < pool.numel(); ++i) {
    if (o.written[i]) {  // reads of a vector<bool> from many threads: safe (no thread writes it here)
      std::memcpy(got_b + i * esize, now + i * esize, esize);
      ref_f[i] = o.pool[i];
    } else if (std::memcmp(now + i * esize, before + i * esize, esize) != 0) {
      ++changed;
    }
  }
  v.untouched_changed += changed;
  v.pool = compare_state(got, ref, tol, per / d.pool.shape[1]);
  v.pass = v.out.pass && v.pool.pass && v.untouched_changed == 0;
  return v;
}

FusedDecodeOracle decode_fused_oracle(const DecodeCase& d) {
  const CaseSpec& s = d.c.spec;
  const int64_t N = s.B, T = s.T, H = s.H, HV = s.HV, K = s.K, V = s.V, G = HV / H;
  const int64_t per = d.pool.numel() / d.spec.slots;  // floats per slot
  FusedDecodeOracle r;
  DecodeOracle& o = r.base;
  copy_pool(d, o);
  o.out.out = make_tensor(KDA_DTYPE_FLOAT64, {N, T, HV, V});
  o.out.out_mag.assign(static_cast<size_t>(N * T * HV * V), 0.0);
  const int64_t dims[3] = {H * K, H * K, HV * V};
  for (int i = 0; i < 3 && d.spec.conv; ++i) {
    r.conv_state[i].resize(static_cast<size_t>(d.conv_state[i].numel()));
    for (int64_t j = 0; j < d.conv_state[i].numel(); ++j) r.conv_state[i][j] = d.conv_state[i].at(j);
    r.conv_written[i].assign(r.conv_state[i].size(), false);
  }
  auto sig = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  const double scale = s.default_scale ? 1.0 / std::sqrt(static_cast<double>(K)) : s.scale;
  for (int64_t n = 0; n < N; ++n) {
    const int64_t slot = start_slot(d, n);
    if (slot < 0) continue;  // outputs stay 0, nothing written
    // Inputs after the conv: x[i][t][c] (q, k per q/k channel; v per value channel).
    std::vector<std::vector<std::vector<double>>> x(3);
    for (int i = 0; i < 3; ++i) {
      const HostTensor& src = i == 0 ? d.c.q : i == 1 ? d.c.k : d.c.v;
      x[i].assign(static_cast<size_t>(T), std::vector<double>(static_cast<size_t>(dims[i])));
      for (int64_t c = 0; c < dims[i]; ++c) {
        std::vector<double> seq;
        if (d.spec.conv)
          for (int j = 0; j < 3; ++j) seq.push_back(d.conv_state[i].at((slot * dims[i] + c) * 3 + j));
        for (int64_t t = 0; t < T; ++t) seq.push_back(src.at((n * T + t) * dims[i] + c));  // contiguous [N,T,heads,dim]
        for (int64_t t = 0; t < T; ++t) {
          if (!d.spec.conv) { x[i][t][c] = seq[t]; continue; }
          double acc = 0;
          for (int j = 0; j < 4; ++j) acc += d.conv_w[i].at(c * 4 + j) * seq[t + j];
          x[i][t][c] = acc / (1.0 + std::exp(-acc));
        }
        if (d.spec.conv)
          for (int64_t t = 0; t < T; ++t) {
            const int64_t w = token_slot(d, n, t);
            if (w < 0) continue;
            for (int j = 0; j < 3; ++j) {
              r.conv_state[i][(w * dims[i] + c) * 3 + j] = seq[t + 1 + j];
              r.conv_written[i][(w * dims[i] + c) * 3 + j] = true;
            }
          }
      }
    }
    for (int64_t hv = 0; hv < HV; ++hv) {
      const int64_t h = hv / G;
      std::vector<double> S(static_cast<size_t>(V * K));  // value-first
      auto at = [&](int64_t vi, int64_t ki) { return s.v_first ? vi * K + ki : ki * V + vi; };
      for (int64_t vi = 0; vi < V; ++vi)
        for (int64_t ki = 0; ki < K; ++ki) S[vi * K + ki] = d.pool.at(slot * per + hv * V * K + at(vi, ki));
      for (int64_t t = 0; t < T; ++t) {
        std::vector<double> q(K), k(K), a(K), vv(V), o_row(V), mag(V);
        for (int64_t ki = 0; ki < K; ++ki) { q[ki] = x[0][t][h * K + ki]; k[ki] = x[1][t][h * K + ki]; }
        for (int64_t vi = 0; vi < V; ++vi) vv[vi] = x[2][t][hv * V + vi];
        if (s.l2norm)
          for (auto* z : {&q, &k}) {
            double ss = 0;
            for (double e : *z) ss += e * e;
            for (double& e : *z) e /= std::sqrt(ss + 1e-6);
          }
        for (int64_t ki = 0; ki < K; ++ki) {
          const double g = d.c.g.at(((n * T + t) * HV + hv) * K + ki);
          const double bias = d.c.dt_bias.present() ? d.c.dt_bias.at(hv * K + ki) : 0.0;
          const double al = d.c.A_log.present() ? d.c.A_log.at(hv) : 0.0;
          double gl = g;
          if (s.gate == KDA_GATE_SOFTPLUS) {
            const double z = g + bias;
            gl = -std::exp(al) * (z > 20 ? z : std::log1p(std::exp(z)));
          } else if (s.gate == KDA_GATE_BOUNDED) {
            gl = s.lower_bound * sig((d.c.A_log.present() ? std::exp(al) : 1.0) * (g + bias));
          }
          a[ki] = std::exp(gl);
        }
        double beta = d.c.beta.at((n * T + t) * HV + hv);
        if (s.beta_logits) beta = sig(beta);
        if (s.neg_eigval) beta *= 2;
        for (int64_t vi = 0; vi < V; ++vi) {
          double sk = 0;
          for (int64_t ki = 0; ki < K; ++ki) { S[vi * K + ki] *= a[ki]; sk += S[vi * K + ki] * k[ki]; }
          const double u = beta * (vv[vi] - sk);
          double acc = 0, m = 0;
          for (int64_t ki = 0; ki < K; ++ki) {
            S[vi * K + ki] += u * k[ki];
            acc += S[vi * K + ki] * q[ki];
            m += std::fabs(S[vi * K + ki] * q[ki]);
          }
          o_row[vi] = scale * acc;
          mag[vi] = scale * m;
        }
        if (d.spec.norm) {
          double ss = 0, mm = 0;
          for (int64_t vi = 0; vi < V; ++vi) { ss += o_row[vi] * o_row[vi]; mm += mag[vi] * mag[vi]; }
          const double rr = 1.0 / std::sqrt(ss / V + d.spec.norm_eps), mrms = std::sqrt(mm / V);
          for (int64_t vi = 0; vi < V; ++vi) {
            const double gt = d.out_gate.at(((n * T + t) * HV + hv) * V + vi);
            const double act = d.spec.norm_act == KDA_OUT_GATE_SIGMOID ? sig(gt) : gt * sig(gt);
            const double f = rr * d.norm_w.at(vi) * act;
            o_row[vi] *= f;
            mag[vi] = std::fabs(f) * (mag[vi] + mrms);  // the row's own error plus that of its RMS
          }
        }
        for (int64_t vi = 0; vi < V; ++vi) {
          o.out.out.set(((n * T + t) * HV + hv) * V + vi, o_row[vi]);
          o.out.out_mag[((n * T + t) * HV + hv) * V + vi] = mag[vi];
        }
        const int64_t w = token_slot(d, n, t);
        if (w >= 0)
          for (int64_t vi = 0; vi < V; ++vi)
            for (int64_t ki = 0; ki < K; ++ki) {
              o.pool[w * per + hv * V * K + at(vi, ki)] = S[vi * K + ki];
              o.written[w * per + hv * V * K + at(vi, ki)] = true;
            }
      }
    }
  }
  return r;
}

DecodeVerdict judge_fused_decode(const DecodeCase& d, const FusedDecodeOracle& o, const HostTensor& out,
                                 const HostTensor& pool, const HostTensor* conv_state, const Tolerance& tol) {
  DecodeVerdict v = judge_decode(d, o.base, out, pool, tol);
  if (d.spec.conv)
    for (int i = 0; i < 3; ++i)
      for (int64_t j = 0; j < conv_state[i].numel(); ++j) {
        if (o.conv_written[i][j]) {
          if (conv_state[i].at(j) != o.conv_state[i][j]) ++v.conv_wrong;
        } else if (std::memcmp(static_cast<const uint8_t*>(conv_state[i].data()) + j * (conv_state[i].bytes.size() / conv_state[i].numel()),
                               static_cast<const uint8_t*>(d.conv_state[i].data()) + j * (conv_state[i].bytes.size() / conv_state[i].numel()),
                               conv_state[i].bytes.size() / conv_state[i].numel()) != 0) {
          ++v.untouched_changed;
        }
      }
  v.pass = v.pass && v.untouched_changed == 0 && v.conv_wrong == 0;
  return v;
}

std::vector<DecodeSpec> fused_decode_cases() {
  std::vector<DecodeSpec> v;
  auto base = [](const std::string& name) {
    DecodeSpec s;
    s.name = name;
    s.io.name = name;
    s.io.B = 6;
    s.io.T = 1;
    s.io.H = 2;
    s.io.HV = 4;
    s.io.K = 64;
    s.io.V = 32;
    s.slots = 20;
    s.padding = 0.3;
    return s;
  };
  { DecodeSpec s = base("fused_conv"); s.conv = true; v.push_back(s); }
  { DecodeSpec s = base("fused_norm_sigmoid"); s.norm = true; v.push_back(s); }
  { DecodeSpec s = base("fused_norm_silu_eps0"); s.norm = true; s.norm_act = KDA_OUT_GATE_SILU; s.norm_eps = 0.0f; v.push_back(s); }
  { DecodeSpec s = base("fused_both_k128_softplus"); s.conv = s.norm = true; s.io.K = s.io.V = 128; s.io.HV = 2; s.io.gate = KDA_GATE_SOFTPLUS; v.push_back(s); }
  { DecodeSpec s = base("fused_both_k_first"); s.conv = s.norm = true; s.io.v_first = false; v.push_back(s); }
  { DecodeSpec s = base("fused_both_three_tokens_1d"); s.conv = s.norm = true; s.io.T = 3; v.push_back(s); }
  { DecodeSpec s = base("fused_both_spec_verify_accepted"); s.conv = s.norm = true; s.io.T = 5; s.per_token = true; s.with_accepted = true; s.slots = 40; v.push_back(s); }
  { DecodeSpec s = base("fused_conv_spec_verify_10_tokens"); s.conv = true; s.io.T = 10; s.per_token = true; s.slots = 70; v.push_back(s); }
  { DecodeSpec s = base("fused_both_bf16_pool"); s.conv = s.norm = true; s.pool_dtype = KDA_DTYPE_BFLOAT16; v.push_back(s); }
  { DecodeSpec s = base("fused_both_fp32_log_decay"); s.conv = s.norm = true; s.io.gate = KDA_GATE_LOG_DECAY; s.io.in_dtype = s.io.g_dtype = s.io.beta_dtype = KDA_DTYPE_FLOAT32; v.push_back(s); }
  return v;
}

std::vector<DecodeSpec> decode_cases() {
  auto base = [](const std::string& name) {
    DecodeSpec s;
    s.name = name;
    s.io.name = name;
    s.io.B = 5;
    s.io.T = 1;
    s.io.H = 2;
    s.io.HV = 2;
    s.io.K = s.io.V = 64;
    s.slots = 16;
    s.padding = 0.3;
    return s;
  };
  std::vector<DecodeSpec> v;
  v.push_back(base("one_token_bounded"));
  { DecodeSpec s = base("one_token_k128_softplus"); s.io.K = s.io.V = 128; s.io.gate = KDA_GATE_SOFTPLUS; v.push_back(s); }
  { DecodeSpec s = base("k_first_pool"); s.io.v_first = false; v.push_back(s); }
  { DecodeSpec s = base("grouped_heads_k16_v32"); s.io.HV = 6; s.io.K = 16; s.io.V = 32; v.push_back(s); }
  { DecodeSpec s = base("k256"); s.io.K = s.io.V = 256; s.io.H = s.io.HV = 1; v.push_back(s); }
  { DecodeSpec s = base("log_decay_fp32_inputs"); s.io.gate = KDA_GATE_LOG_DECAY; s.io.in_dtype = s.io.g_dtype = s.io.beta_dtype = KDA_DTYPE_FLOAT32; v.push_back(s); }
  { DecodeSpec s = base("three_tokens_1d_indices"); s.io.T = 3; v.push_back(s); }
  { DecodeSpec s = base("spec_verify_2d_indices"); s.io.T = 4; s.per_token = true; s.slots = 32; v.push_back(s); }
  {
    DecodeSpec s = base("spec_verify_num_accepted");
    s.io.T = 4;
    s.per_token = true;
    s.with_accepted = true;
    s.slots = 32;
    s.io.gate = KDA_GATE_SOFTPLUS;
    s.io.recipe.A_log_fixed = std::log(4.0);
    s.io.recipe.g_mean = 3;
    v.push_back(s);
  }
  { DecodeSpec s = base("all_padding"); s.padding = 1.0; v.push_back(s); }
  // bf16 pools (value-first, the form CUDA takes): one token at K = 64 and 256, a speculative verify at K = 128.
  { DecodeSpec s = base("bf16_pool"); s.pool_dtype = KDA_DTYPE_BFLOAT16; v.push_back(s); }
  { DecodeSpec s = base("bf16_pool_k256"); s.pool_dtype = KDA_DTYPE_BFLOAT16; s.io.K = s.io.V = 256; s.io.H = s.io.HV = 1; v.push_back(s); }
  {
    DecodeSpec s = base("bf16_pool_k128_spec_verify_num_accepted");
    s.pool_dtype = KDA_DTYPE_BFLOAT16;
    s.io.K = s.io.V = 128;
    s.io.T = 4;
    s.per_token = true;
    s.with_accepted = true;
    s.slots = 32;
    v.push_back(s);
  }
  { DecodeSpec s = base("h0_up_to_1e4_beta_2"); s.io.recipe.h0_std = 3000; s.io.neg_eigval = true; s.io.recipe.beta_mean = 12; v.push_back(s); }
  return v;
}

}  // namespace kda::testing
