// compare.cpp: oracle runs and the element-wise / relative-RMSE checks of compare.h.
#include "common/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "api/validate.h"
#include "reference/reference.h"

namespace kda::testing {

Oracle run_oracle(Case& c, bool key_tangent) {
  Oracle o;
  Outputs outs = make_outputs(c, KDA_DTYPE_FLOAT64, KDA_DTYPE_FLOAT64);
  kda_forward_args_t a = host_args(c, outs, KDA_BACKEND_REFERENCE);
  ForwardParams p;
  Status s = validate_forward(&a, &p);
  if (!s.ok()) {
    // A case the ABI rejects is a bug of the case list: thrown, so a test binary reports it as that test's failure
    // and runs the rest (an abort hid every later case's result on the H200, session 11).
    throw std::invalid_argument("oracle: invalid case " + c.spec.name + ": " + s.message);
  }
  o.out_mag.assign(static_cast<size_t>(outs.out.numel()), 0.0);
  reference::KeyScaleTangent tangent{nullptr, nullptr};
  if (key_tangent) {
    o.out_tangent.assign(static_cast<size_t>(outs.out.numel()), 0.0);
    o.state_tangent.assign(static_cast<size_t>(outs.final_state.present() ? outs.final_state.numel() : 0), 0.0);
    tangent = {o.out_tangent.data(), o.state_tangent.data()};
  }
  reference::forward(p, o.out_mag.data(), key_tangent ? &tangent : nullptr);
  o.out = std::move(outs.out);
  o.final_state = std::move(outs.final_state);
  return o;
}

int64_t longest_sequence(const CaseSpec& s) {
  if (s.seqlens.empty()) return s.T;
  int64_t m = 0;
  for (int64_t l : s.seqlens) m = std::max(m, l);
  return m;
}

Tolerance tolerance_for(kda_dtype_t out_dtype, ComputeClass cls, int64_t longest_sequence) {
  Tolerance t;
  switch (out_dtype) {
    case KDA_DTYPE_BFLOAT16: t.u_out = std::ldexp(1.0, -8); break;
    case KDA_DTYPE_FLOAT16: t.u_out = std::ldexp(1.0, -11); break;
    default: t.u_out = std::ldexp(1.0, -24); break;
  }
  if (cls == ComputeClass::kFp32) {
    t.c_elem = std::ldexp(1.0, -10);
    // 2^-17: the chunked fp32 algorithms' rounding (docs/numerics.md). A token-by-token recurrence also pays one
    // fp32 exp (<= 2 ulp = 2^-22 relative) and a rounded multiply per token on every state entry; over L tokens of a
    // long-memory state those add as a random walk, sqrt(L) 2^-22 (measured on the H200: 1.67e-5 = sqrt(8192)
    // 2^-22.4 with beta near 0), so the allowance is sqrt(L) 2^-21 where that is larger (L > 256).
    t.c_rms = std::max(std::ldexp(1.0, -17), std::ldexp(std::sqrt(static_cast<double>(longest_sequence)), -21));
  } else {
    t.c_elem = std::ldexp(1.0, -6);
    t.c_rms = std::ldexp(1.0, -9);
  }
  return t;
}

std::string Tolerance::describe() const {
  char buf[160];
  std::snprintf(buf, sizeof buf, "u_out=%.3g c_elem=%.3g c_rms=%.3g", u_out, c_elem, c_rms);
  return buf;
}

std::string ErrorStats::summary() const {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s rel_rmse=%.3e (bound %.3e) worst=%.3f of bound at %lld, nonfinite=%lld",
                pass ? "PASS" : "FAIL", rel_rmse, rmse_bound, worst_ratio, static_cast<long long>(worst_index),
                static_cast<long long>(nonfinite));
  return buf;
}

namespace {
// The absolute error every element may have whatever its size: far below any fp32 signal (fp32's smallest normal is
// 1.2e-38, and kernels flush subnormals), so values the oracle resolves below it are not judged.
constexpr double kAbsFloor = 1e-30;

// Finishes the stats from per-element (x, ref, bound) triples.
template <typename F>
ErrorStats judge(int64_t n, F&& element, double rmse_bound) {
  ErrorStats st;
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    double x, ref, bound;
    element(i, &x, &ref, &bound);
    if (!std::isfinite(x)) {
      ++st.nonfinite;
      if (st.worst_index < 0 || std::isfinite(st.worst_ratio)) st.worst_index = i;
      st.worst_ratio = INFINITY;
      continue;
    }
    const double d = x - ref;
    num += d * d;
    den += ref * ref;
    const double ratio = std::fabs(d) / (bound > 0 ? bound : 1e-300);
    if (ratio > st.worst_ratio && std::isfinite(st.worst_ratio)) {
      st.worst_ratio = ratio;
      st.worst_index = i;
    }
  }
  st.rel_rmse = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  st.rmse_bound = rmse_bound;
  st.pass = st.nonfinite == 0 && st.worst_ratio <= 1.0 && st.rel_rmse <= rmse_bound;
  return st;
}
// The relative RMSE that rounding each element x_i to a format of unit roundoff u can reach. Each error e_i is
// at most u |x_i| and, for round-to-nearest, averages e_i^2 <= u^2 x_i^2 / 3; Hoeffding's inequality on the
// bounded terms e_i^2 gives sum e_i^2 <= u^2 (sum x^2 / 3 + sqrt(sum x^4 ln(1/delta) / 2)) but with probability
// delta, that is rel RMSE^2 <= u^2 (1/3 + sqrt(ln(1/delta) / (2 n_eff))) with n_eff = (sum x^2)^2 / sum x^4 the
// effective number of elements. It never exceeds u (every e_i <= u |x_i|). For large tensors this is u/sqrt(3);
// a small one dominated by a few elements (a gated RMSNorm output of 768 values measured n_eff = 8.8, its exact
// bf16 rounding 2.58e-3 > 2^-8/sqrt(3)) gets up to u. delta = 1e-9.
double rounding_rms(double u, double sum2, double sum4) {
  if (u == 0 || sum2 <= 0 || sum4 <= 0) return u / std::sqrt(3.0);
  const double n_eff = sum2 * sum2 / sum4;
  const double f2 = 1.0 / 3.0 + std::sqrt(std::log(1e9) / (2.0 * n_eff));
  return u * std::sqrt(std::min(1.0, f2));
}

// The element bounds of compare_out and compare_state (u_s: the state's storage rounding, 0 for fp32).
double out_bound(const Tolerance& tol, double ref, double mag) {
  return tol.u_out * std::fabs(ref) + (tol.u_out + tol.c_elem) * mag + kAbsFloor;
}
double state_bound(const Tolerance& tol, double u_s, double ref, double block_rms) {
  return u_s * std::fabs(ref) + tol.c_elem * (std::fabs(ref) + block_rms) + kAbsFloor;
}
// The RMS of the reference state over each block of `block` elements (a (sequence, head) state).
std::vector<double> block_rms_of(const HostTensor& ref, int64_t block) {
  const int64_t n = ref.numel();
  std::vector<double> rms(static_cast<size_t>((n + block - 1) / block), 0.0);
  for (int64_t i = 0; i < n; ++i) rms[i / block] += ref.at(i) * ref.at(i);
  for (double& r : rms) r = std::sqrt(r / block);
  return rms;
}
double storage_roundoff(kda_dtype_t dt) {
  return dt == KDA_DTYPE_BFLOAT16 ? std::ldexp(1.0, -8) : dt == KDA_DTYPE_FLOAT16 ? std::ldexp(1.0, -11) : 0.0;
}
// A gradient tensor's unit roundoff: its storage's, fp32's (2^-24) for fp32, none for fp64.
double grad_roundoff(kda_dtype_t dt) {
  return dt == KDA_DTYPE_FLOAT64 ? 0.0 : dt == KDA_DTYPE_FLOAT32 ? std::ldexp(1.0, -24) : storage_roundoff(dt);
}
}  // namespace

ErrorStats compare_out(const HostTensor& got, const Oracle& o, const Tolerance& tol, const std::vector<double>* shift) {
  double sum2 = 0, sum4 = 0;
  for (int64_t i = 0; i < o.out.numel(); ++i) {
    const double r2 = o.out.at(i) * o.out.at(i);
    sum2 += r2;
    sum4 += r2 * r2;
  }
  return judge(
      got.numel(),
      [&](int64_t i, double* x, double* ref, double* bound) {
        *x = got.at(i) - (shift ? (*shift)[i] : 0.0);
        *ref = o.out.at(i);
        *bound = out_bound(tol, *ref, o.out_mag[i]);
      },
      rounding_rms(tol.u_out, sum2, sum4) + tol.c_rms);
}

ErrorStats compare_state(const HostTensor& got, const Oracle& o, const Tolerance& tol, int64_t block,
                         const std::vector<double>* shift) {
  const int64_t n = got.numel();
  // A state stored in a narrower format than fp32 (a bf16 decode pool) gets its one rounding on top of the compute
  // allowance, as an output does: u_s |ref| an element, rounding_rms(u_s) in the relative RMSE.
  const double u_s = storage_roundoff(got.dtype);
  const std::vector<double> block_rms = block_rms_of(o.final_state, block);
  double sum2 = 0, sum4 = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double r2 = o.final_state.at(i) * o.final_state.at(i);
    sum2 += r2;
    sum4 += r2 * r2;
  }
  return judge(
      n,
      [&](int64_t i, double* x, double* ref, double* bound) {
        *x = got.at(i) - (shift ? (*shift)[i] : 0.0);
        *ref = o.final_state.at(i);
        *bound = state_bound(tol, u_s, *ref, block_rms[i / block]);
      },
      (u_s > 0 ? rounding_rms(u_s, sum2, sum4) : 0.0) + tol.c_rms);
}

std::vector<double> grad_bounds(const HostTensor& got, const std::vector<double>& ref, const std::vector<double>* mag,
                                const Tolerance& tol, const GradLayout& layout) {
  const int64_t n = got.numel();
  const double u_g = grad_roundoff(got.dtype);
  const int64_t row = layout.heads * layout.inner;
  const int64_t tokens = row > 0 ? n / row : 0;
  const int64_t tblocks = (tokens + layout.token_block - 1) / layout.token_block;
  auto block_of = [&](int64_t i) { return (i / row / layout.token_block) * layout.heads + (i / layout.inner) % layout.heads; };
  std::vector<double> rms(static_cast<size_t>(std::max<int64_t>(tblocks * layout.heads, 1)), 0.0), cnt(rms.size(), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    rms[block_of(i)] += ref[i] * ref[i];
    cnt[block_of(i)] += 1;
  }
  for (size_t b = 0; b < rms.size(); ++b) rms[b] = cnt[b] > 0 ? std::sqrt(rms[b] / cnt[b]) : 0.0;
  std::vector<double> bound(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const double m = mag ? (*mag)[i] : 0.0;
    bound[i] = u_g * std::fabs(ref[i]) + tol.c_elem * (std::fabs(ref[i]) + rms[block_of(i)] + m) + kAbsFloor;
  }
  return bound;
}

ErrorStats compare_grad(const HostTensor& got, const std::vector<double>& ref, const std::vector<double>* mag,
                        const Tolerance& tol, const GradLayout& layout, const std::vector<double>* shift) {
  const int64_t n = got.numel();
  if (static_cast<int64_t>(ref.size()) != n || (mag && static_cast<int64_t>(mag->size()) != n)) {
    ErrorStats st;
    st.pass = false;
    st.nonfinite = n;
    return st;
  }
  const std::vector<double> bound = grad_bounds(got, ref, mag, tol, layout);
  auto x_at = [&](int64_t i) { return got.at(i) - (shift ? (*shift)[i] : 0.0); };
  double sum2 = 0, sum4 = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double r2 = ref[i] * ref[i];
    sum2 += r2;
    sum4 += r2 * r2;
  }
  ErrorStats st = judge(
      n,
      [&](int64_t i, double* x, double* r, double* b) {
        *x = x_at(i);
        *r = ref[i];
        *b = bound[i];
      },
      tol.c_rms + rounding_rms(grad_roundoff(got.dtype), sum2, sum4));
  if (mag) {  // RMSE relative to the sizes of the sums: ||x - ref|| / ||max(|ref|, mag)||
    // Each difference first gives up the element bound's absolute allowance (kAbsFloor): a gradient the float64
    // oracle puts at 1e-66 (a bounded gate saturated 150 nats deep: sigmoid'(z) = e^-z) is 0 or subnormal in any
    // fp32 tensor, and without the allowance the relative RMSE of such a case measured fp32's underflow, not the
    // implementation (the oracle's own s (1 - s) flushed those to 0 until the sigmoid_grad fix).
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double d = std::max(std::fabs(x_at(i) - ref[i]) - kAbsFloor, 0.0);
      const double s = std::max(std::fabs(ref[i]), (*mag)[i]);
      if (std::isfinite(d)) num += d * d;
      den += s * s;
    }
    st.rel_rmse = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    st.pass = st.nonfinite == 0 && st.worst_ratio <= 1.0 && st.rel_rmse <= st.rmse_bound;
  }
  return st;
}

void DeltaFit::add(int64_t g, double err, double t, double bound) {
  if (t == 0 || !std::isfinite(err)) return;
  const double w = 1.0 / (bound * bound);
  num_[g] += w * err * t;
  den_[g] += w * t * t;
}

std::vector<double> DeltaFit::solve(double limit, double* max_u) const {
  std::vector<double> d(num_.size(), 0.0);
  *max_u = 0;
  for (size_t g = 0; g < d.size(); ++g) {
    d[g] = den_[g] > 0 ? std::clamp(num_[g] / den_[g], -limit, limit) : 0.0;
    *max_u = std::max(*max_u, std::ldexp(std::fabs(d[g]), 24));
  }
  return d;
}

double key_norm_delta_limit(int K) { return std::ldexp(K / 2.0 + 5.0, -24); }

KeyNormFit fit_key_norm(const Case& c, const HostTensor& out, const HostTensor* state, const Oracle& o,
                        const Tolerance& tol) {
  const CaseSpec& s = c.spec;
  const int64_t HV = s.HV, V = s.V, block = int64_t{s.K} * s.V, group = s.HV / s.H;
  // An element's q / k head: one delta per head, its keys in every sequence (keys that repeat round alike).
  auto out_head = [&](int64_t i) { return (i / V) % HV / group; };
  auto state_head = [&](int64_t i) { return (i / block) % HV / group; };
  DeltaFit fit(s.H);
  for (int64_t i = 0; i < out.numel(); ++i)
    fit.add(out_head(i), out.at(i) - o.out.at(i), o.out_tangent[i], out_bound(tol, o.out.at(i), o.out_mag[i]));
  if (state) {
    const std::vector<double> block_rms = block_rms_of(o.final_state, block);
    const double u_s = storage_roundoff(state->dtype);
    for (int64_t i = 0; i < state->numel(); ++i)
      fit.add(state_head(i), state->at(i) - o.final_state.at(i), o.state_tangent[i],
              state_bound(tol, u_s, o.final_state.at(i), block_rms[i / block]));
  }
  KeyNormFit f;
  const std::vector<double> delta = fit.solve(key_norm_delta_limit(s.K), &f.max_delta);
  f.out_shift.resize(static_cast<size_t>(out.numel()));
  for (int64_t i = 0; i < out.numel(); ++i) f.out_shift[i] = delta[out_head(i)] * o.out_tangent[i];
  if (state) {
    f.state_shift.resize(static_cast<size_t>(state->numel()));
    for (int64_t i = 0; i < state->numel(); ++i) f.state_shift[i] = delta[state_head(i)] * o.state_tangent[i];
  }
  return f;
}

ForwardVerdict judge_forward(Case& c, const Oracle& o, const HostTensor& out, const HostTensor* state,
                             const Tolerance& tol) {
  const int64_t block = int64_t{c.spec.K} * c.spec.V;
  ForwardVerdict v;
  v.out = compare_out(out, o, tol);
  if (state) v.state = compare_state(*state, o, tol, block);
  v.pass = v.out.pass && v.state.pass;
  if (v.pass || !c.spec.l2norm || v.out.nonfinite > 0 || v.state.nonfinite > 0) return v;
  const Oracle ot = run_oracle(c, true);
  const KeyNormFit fit = fit_key_norm(c, out, state, ot, tol);
  v.key_norm_delta = fit.max_delta;
  v.out = compare_out(out, ot, tol, &fit.out_shift);
  if (state) v.state = compare_state(*state, ot, tol, block, &fit.state_shift);
  v.pass = v.out.pass && v.state.pass;
  return v;
}

}  // namespace kda::testing
