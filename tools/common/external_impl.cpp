// external_impl.cpp: the file protocol of external_impl.h.
#include "common/external_impl.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

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

kda_status_t run_external(const std::string& command, Case& c, Outputs& o, std::string* error) {
  char tmpl[] = "/tmp/kda-verify-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    *error = "cannot create a temporary directory";
    return KDA_STATUS_INTERNAL_ERROR;
  }
  const std::string dir = tmpl;
  const CaseSpec& s = c.spec;
  std::ostringstream j;
  j.precision(17);
  const char* gate = s.gate == KDA_GATE_SOFTPLUS ? "softplus" : s.gate == KDA_GATE_BOUNDED ? "bounded" : "log_decay";
  const double scale = s.default_scale ? 1.0 / std::sqrt(static_cast<double>(s.K)) : s.scale;
  j << "{\n  \"B\": " << s.B << ", \"T\": " << s.T << ", \"H\": " << s.H << ", \"HV\": " << s.HV << ", \"K\": " << s.K
    << ", \"V\": " << s.V << ", \"N\": " << c.N << ",\n  \"gate\": \"" << gate << "\", \"lower_bound\": "
    << s.lower_bound << ", \"scale\": " << scale << ",\n  \"use_qk_l2norm\": " << (s.l2norm ? "true" : "false")
    << ", \"beta_is_logits\": " << (s.beta_logits ? "true" : "false")
    << ", \"allow_neg_eigval\": " << (s.neg_eigval ? "true" : "false")
    << ", \"state_v_first\": " << (s.v_first ? "true" : "false")
    << ", \"output_final_state\": " << (s.want_final ? "true" : "false") << ",\n  \"tensors\": {";
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
  j << "\n  },\n  \"outputs\": {\"out\": {\"dtype\": \"" << dtype_name(o.out.dtype) << "\", \"shape\": "
    << shape_json(o.out.shape) << "}";
  if (o.final_state.present())
    j << ", \"final_state\": {\"dtype\": \"float32\", \"shape\": " << shape_json(o.final_state.shape) << "}";
  j << "}\n}\n";
  std::ofstream(dir + "/case.json") << j.str();

  const std::string cmd = command + " " + dir + " > " + dir + "/log.txt 2>&1";
  const int rc = std::system(cmd.c_str());
  kda_status_t st = KDA_STATUS_SUCCESS;
  if (rc != 0) {
    std::ifstream lf(dir + "/log.txt");
    std::string log((std::istreambuf_iterator<char>(lf)), std::istreambuf_iterator<char>());
    if (log.size() > 400) log = "..." + log.substr(log.size() - 400);
    *error = "command exited with " + std::to_string(rc) + ": " + log;
    st = KDA_STATUS_INTERNAL_ERROR;
  } else if (!read_file(dir + "/out.bin", o.out, error) ||
             (o.final_state.present() && !read_file(dir + "/final_state.bin", o.final_state, error))) {
    st = KDA_STATUS_INTERNAL_ERROR;
  }
  std::system(("rm -rf " + dir).c_str());
  return st;
}

}  // namespace kda::testing
