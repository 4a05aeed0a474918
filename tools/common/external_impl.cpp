// external_impl.cpp: the file protocol of external_impl.h.
#include "common/external_impl.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/host_access.h"

namespace kda::testing {
namespace {

std::string shape_json(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

bool write_file(const std::string& path, const HostTensor& t) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
  return static_cast<bool>(f);
}

bool read_file(const std::string& path, HostTensor& t, std::string* error) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) {
    *error = "the implementation wrote no " + path;
    return false;
  }
  const std::streamsize n = f.tellg();
  if (n != static_cast<std::streamsize>(t.bytes.size())) {
    *error = path + ": " + std::to_string(n) + " bytes, expected " + std::to_string(t.bytes.size());
    return false;
  }
  f.seekg(0);
  f.read(reinterpret_cast<char*>(t.bytes.data()), n);
  return static_cast<bool>(f);
}

}  // namespace

namespace {

std::string make_dir(std::string* error) {
  char tmpl[] = "/tmp/kda-verify-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    *error = "cannot create a temporary directory";
    return "";
  }
  return tmpl;
}

// Writes the case's inputs (plus `extra` tensors) into dir and case.json with the given request and outputs;
// `fields` (JSON members, each followed by ",\n  ") go after the flags.
void write_request(const std::string& dir, const Case& c, const char* request,
                   const std::vector<std::pair<const char*, const HostTensor*>>& extra,
                   const std::vector<std::pair<const char*, const HostTensor*>>& outputs,
                   const std::string& fields = "") {
  const CaseSpec& s = c.spec;
  std::ostringstream j;
  j.precision(17);
  const char* gate = s.gate == KDA_GATE_SOFTPLUS ? "softplus" : s.gate == KDA_GATE_BOUNDED ? "bounded" : "log_decay";
  const double scale = s.default_scale ? 1.0 / std::sqrt(static_cast<double>(s.K)) : s.scale;
  j << "{\n  \"request\": \"" << request << "\",\n  \"B\": " << s.B << ", \"T\": " << s.T << ", \"H\": " << s.H
    << ", \"HV\": " << s.HV << ", \"K\": " << s.K << ", \"V\": " << s.V << ", \"N\": " << c.N
    << ",\n  \"gate\": \"" << gate << "\", \"lower_bound\": " << s.lower_bound << ", \"scale\": " << scale
    << ",\n  \"use_qk_l2norm\": " << (s.l2norm ? "true" : "false")
    << ", \"beta_is_logits\": " << (s.beta_logits ? "true" : "false")
    << ", \"allow_neg_eigval\": " << (s.neg_eigval ? "true" : "false")
    << ", \"state_v_first\": " << (s.v_first ? "true" : "false")
    << ", \"output_final_state\": " << (s.want_final ? "true" : "false") << ",\n  " << fields << "\"tensors\": {";
  bool first = true;
  auto put = [&](const char* name, const HostTensor& t) {
    if (!t.present()) return;
    write_file(dir + "/" + name + ".bin", t);
    j << (first ? "\n" : ",\n") << "    \"" << name << "\": {\"dtype\": \"" << dtype_name(t.dtype)
      << "\", \"shape\": " << shape_json(t.shape) << "}";
    first = false;
  };
  put("q", c.q);
  put("k", c.k);
  put("v", c.v);
  put("g", c.g);
  put("beta", c.beta);
  put("A_log", c.A_log);
  put("dt_bias", c.dt_bias);
  put("initial_state", c.h0);
  put("cu_seqlens", c.cu_seqlens);
  for (const auto& [name, t] : extra) put(name, *t);
  j << "\n  },\n  \"outputs\": {";
  first = true;
  for (const auto& [name, t] : outputs) {
    if (!t->present()) continue;
    j << (first ? "" : ",\n              ") << "\"" << name << "\": {\"dtype\": \"" << dtype_name(t->dtype)
      << "\", \"shape\": " << shape_json(t->shape) << "}";
    first = false;
  }
  j << "}\n}\n";
  std::ofstream(dir + "/case.json") << j.str();
}

// Runs `command dir`; false (with the log's tail in *error) if it exits non-zero.
bool run_command(const std::string& command, const std::string& dir, std::string* error) {
  const std::string cmd = command + " " + dir + " > " + dir + "/log.txt 2>&1";
  const int rc = std::system(cmd.c_str());
  if (rc == 0) return true;
  std::ifstream lf(dir + "/log.txt");
  std::string log((std::istreambuf_iterator<char>(lf)), std::istreambuf_iterator<char>());
  if (log.size() > 400) log = "..." + log.substr(log.size() - 400);
  *error = "command exited with " + std::to_string(rc) + ": " + log;
  return false;
}

}  // namespace

kda_status_t run_external(const std::string& command, Case& c, Outputs& o, std::string* error) {
  const std::string dir = make_dir(error);
  if (dir.empty()) return KDA_STATUS_INTERNAL_ERROR;
  write_request(dir, c, "forward", {}, {{"out", &o.out}, {"final_state", &o.final_state}});
  kda_status_t st = KDA_STATUS_SUCCESS;
  if (!run_command(command, dir, error) || !read_file(dir + "/out.bin", o.out, error) ||
      (o.final_state.present() && !read_file(dir + "/final_state.bin", o.final_state, error)))
    st = KDA_STATUS_INTERNAL_ERROR;
  std::system(("rm -rf " + dir).c_str());
  return st;
}

kda_status_t run_external_backward(const std::string& command, Case& c, const Upstream& up, Grads* g,
                                   std::string* error) {
  const std::string dir = make_dir(error);
  if (dir.empty()) return KDA_STATUS_INTERNAL_ERROR;
  const std::vector<std::pair<const char*, HostTensor*>> grads = {
      {"dq", &g->dq},       {"dk", &g->dk},         {"dv", &g->dv},         {"dg", &g->dg},
      {"dbeta", &g->dbeta}, {"dA_log", &g->dA_log}, {"ddt_bias", &g->ddt_bias}, {"dh0", &g->dh0}};
  std::vector<std::pair<const char*, const HostTensor*>> outs(grads.begin(), grads.end());
  write_request(dir, c, "backward", {{"dout", &up.dout}, {"dfinal_state", &up.dfinal}}, outs);
  kda_status_t st = KDA_STATUS_SUCCESS;
  if (!run_command(command, dir, error)) st = KDA_STATUS_INTERNAL_ERROR;
  for (const auto& [name, t] : grads) {
    if (st != KDA_STATUS_SUCCESS || !t->present()) continue;
    const std::string path = dir + "/" + name + ".bin";
    if (!std::ifstream(path)) {
      g->missing.push_back(name);
      continue;
    }
    if (!read_file(path, *t, error)) st = KDA_STATUS_INTERNAL_ERROR;
  }
  std::system(("rm -rf " + dir).c_str());
  return st;
}

kda_status_t run_external_decode(const std::string& command, DecodeCase& d, HostTensor& out, HostTensor& pool,
                                 HostTensor* conv, std::string* error) {
  const std::string dir = make_dir(error);
  if (dir.empty()) return KDA_STATUS_INTERNAL_ERROR;
  const DecodeSpec& s = d.spec;
  std::ostringstream f;
  f.precision(9);
  f << "\"slots\": " << d.pool.shape[0] << ", \"indices_per_token\": " << (s.per_token ? "true" : "false")
    << ", \"conv\": " << (s.conv ? "true" : "false") << ", \"out_norm\": " << (s.norm ? "true" : "false")
    << ", \"norm_eps\": " << s.norm_eps << ", \"norm_activation\": \""
    << (s.norm_act == KDA_OUT_GATE_SILU ? "silu" : "sigmoid") << "\",\n  ";
  std::vector<std::pair<const char*, const HostTensor*>> extra = {
      {"state_pool", &d.pool}, {"state_indices", &d.indices}, {"num_accepted_tokens", &d.num_accepted}};
  std::vector<std::pair<const char*, const HostTensor*>> outputs = {{"out", &out}, {"state_pool", &pool}};
  const char* conv_w[3] = {"conv_weight_q", "conv_weight_k", "conv_weight_v"};
  const char* conv_s[3] = {"conv_state_q", "conv_state_k", "conv_state_v"};
  if (s.conv)
    for (int i = 0; i < 3; ++i) {
      extra.emplace_back(conv_w[i], &d.conv_w[i]);
      extra.emplace_back(conv_s[i], &d.conv_state[i]);
      outputs.emplace_back(conv_s[i], &conv[i]);
    }
  if (s.norm) {
    extra.emplace_back("out_norm_weight", &d.norm_w);
    extra.emplace_back("out_gate", &d.out_gate);
  }
  write_request(dir, d.c, "decode", extra, outputs, f.str());
  kda_status_t st = KDA_STATUS_SUCCESS;
  if (!run_command(command, dir, error) || !read_file(dir + "/out.bin", out, error) ||
      !read_file(dir + "/state_pool.bin", pool, error))
    st = KDA_STATUS_INTERNAL_ERROR;
  for (int i = 0; s.conv && st == KDA_STATUS_SUCCESS && i < 3; ++i)
    if (!read_file(dir + "/" + conv_s[i] + ".bin", conv[i], error)) st = KDA_STATUS_INTERNAL_ERROR;
  std::system(("rm -rf " + dir).c_str());
  return st;
}

}  // namespace kda::testing
