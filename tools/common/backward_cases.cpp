// backward_cases.cpp: upstream gradients, gradient buffers, host backward calls and the oracle of backward_cases.h.
#include "common/backward_cases.h"

#include <limits>
#include <random>
#include <stdexcept>

#include "api/validate.h"

namespace kda::testing {

Upstream make_upstream(const Case& c, bool with_dfinal, uint64_t seed) {
  std::mt19937_64 rng(seed + 101);
  std::normal_distribution<double> normal(0.0, 1.0);
  Upstream u;
  u.dout = make_tensor(c.spec.in_dtype, {c.spec.B, c.spec.T, c.spec.HV, c.spec.V});
  for (int64_t i = 0; i < u.dout.numel(); ++i) u.dout.set(i, normal(rng));  // rounded to its dtype by set()
  if (with_dfinal) {
    const int64_t r2 = c.spec.v_first ? c.spec.V : c.spec.K, r3 = c.spec.v_first ? c.spec.K : c.spec.V;
    u.dfinal = make_tensor(KDA_DTYPE_FLOAT32, {c.N, c.spec.HV, r2, r3});
    for (int64_t i = 0; i < u.dfinal.numel(); ++i) u.dfinal.set(i, 0.1 * normal(rng));
  }
  return u;
}

Grads make_grads(const Case& c, bool input_dtype) {
  auto like = [&](const HostTensor& x, kda_dtype_t own) {
    if (!x.present()) return HostTensor{};
    HostTensor t = make_tensor(input_dtype ? own : KDA_DTYPE_FLOAT32, x.shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.set(i, std::numeric_limits<double>::quiet_NaN());
    return t;
  };
  Grads g;
  g.dq = like(c.q, c.q.dtype);
  g.dk = like(c.k, c.k.dtype);
  g.dv = like(c.v, c.v.dtype);
  g.dg = like(c.g, c.g.dtype);
  g.dbeta = like(c.beta, c.beta.dtype);
  g.dA_log = like(c.A_log, KDA_DTYPE_FLOAT32);
  g.ddt_bias = like(c.dt_bias, KDA_DTYPE_FLOAT32);
  g.dh0 = like(c.h0, KDA_DTYPE_FLOAT32);
  return g;
}

kda_status_t run_backward_host(Case& c, const Upstream& up, kda_backend_t be, Grads* g) {
  Outputs unused = make_outputs(c, c.spec.in_dtype, KDA_DTYPE_FLOAT32);
  kda_backward_args_t a;
  kda_backward_args_init(&a);
  a.forward = host_args(c, unused, be);
  a.forward.out = kda_tensor_none();
  a.forward.final_state = kda_tensor_none();
  a.dout = up.dout.view();
  a.dfinal_state = up.dfinal.present() ? up.dfinal.view() : kda_tensor_none();
  auto out = [](HostTensor& t) { return t.present() ? t.view() : kda_tensor_none(); };
  a.dq = out(g->dq);
  a.dk = out(g->dk);
  a.dv = out(g->dv);
  a.dg = out(g->dg);
  a.dbeta = out(g->dbeta);
  a.dA_log = out(g->dA_log);
  a.ddt_bias = out(g->ddt_bias);
  a.dh0 = out(g->dh0);
  return kda_backward(&a, nullptr, 0, nullptr);
}

reference::Gradients backward_oracle(Case& c, const Upstream& up, double key_scale) {
  Outputs unused = make_outputs(c, KDA_DTYPE_FLOAT64, KDA_DTYPE_FLOAT64);
  kda_forward_args_t fa = host_args(c, unused, KDA_BACKEND_REFERENCE);
  ForwardParams p;
  Status s = validate_forward(&fa, &p);
  if (!s.ok()) {
    // A case the ABI rejects is a bug of the case list: thrown, so a test binary reports it as that test's failure
    // and runs the rest (an abort hid every later case's result on the H200, session 11).
    throw std::invalid_argument("backward oracle: invalid case " + c.spec.name + ": " + s.message);
  }
  std::vector<double> dout(static_cast<size_t>(up.dout.numel())), dfinal(static_cast<size_t>(up.dfinal.numel()));
  for (size_t i = 0; i < dout.size(); ++i) dout[i] = up.dout.at(static_cast<int64_t>(i));
  for (size_t i = 0; i < dfinal.size(); ++i) dfinal[i] = up.dfinal.at(static_cast<int64_t>(i));
  reference::Gradients ref;
  s = reference::backward<double>(p, dout.data(), dfinal.empty() ? nullptr : dfinal.data(), &ref, false, key_scale);
  if (!s.ok()) {
    throw std::runtime_error("backward oracle: " + c.spec.name + ": " + s.message);  // as an invalid case: one failure
  }
  return ref;
}

std::vector<GradItem> grad_items(const CaseSpec& s, const Grads& g, const reference::Gradients& ref) {
  const int64_t H = s.H, HV = s.HV, K = s.K, V = s.V;
  std::vector<GradItem> items = {{"dq", &g.dq, &ref.dq, nullptr, {H, K, 64}},
                                 {"dk", &g.dk, &ref.dk, nullptr, {H, K, 64}},
                                 {"dv", &g.dv, &ref.dv, nullptr, {HV, V, 64}},
                                 {"dg", &g.dg, &ref.dg, &ref.mag_dg, {HV, K, 64}},
                                 {"dbeta", &g.dbeta, &ref.dbeta, &ref.mag_dbeta, {HV, 1, 64}}};
  if (g.dA_log.present()) items.push_back({"dA_log", &g.dA_log, &ref.dA_log, &ref.mag_dA_log, {1, HV, 1}});
  if (g.ddt_bias.present()) items.push_back({"ddt_bias", &g.ddt_bias, &ref.ddt_bias, &ref.mag_ddt_bias, {HV, K, 1}});
  if (g.dh0.present()) items.push_back({"dh0", &g.dh0, &ref.dh0, nullptr, {HV, V * K, 1}});
  return items;
}

int64_t key_head_of(const GradItem& it, const CaseSpec& s, int64_t i) {
  const int64_t group = s.HV / s.H;
  if (it.name == "dq" || it.name == "dk") return (i / s.K) % s.H;
  if (it.name == "dA_log") return i / group;  // [HV]
  return (i / it.layout.inner) % it.layout.heads / group;  // dv, dg, dbeta, ddt_bias, dh0: value heads
}

}  // namespace kda::testing
