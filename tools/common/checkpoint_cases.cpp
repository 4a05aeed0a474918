// checkpoint_cases.cpp: see checkpoint_cases.h.
#include "common/checkpoint_cases.h"

#include <algorithm>
#include <cstring>

namespace kda::testing {

HostTensor make_checkpoints(const Case& c, int64_t n_ckpt, kda_dtype_t dtype, double fill) {
  const CaseSpec& s = c.spec;
  HostTensor t = make_tensor(dtype, s.v_first ? std::vector<int64_t>{c.N, n_ckpt, s.HV, s.V, s.K}
                                              : std::vector<int64_t>{c.N, n_ckpt, s.HV, s.K, s.V});
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, fill);
  return t;
}

int64_t checkpoint_count_of(const HostTensor& offsets, int64_t interval, int64_t n, int64_t n_ckpt, int64_t j) {
  return offsets.present() ? static_cast<int64_t>(offsets.at(n * n_ckpt + j)) : (j + 1) * interval;
}

std::vector<int64_t> sequence_lengths(const Case& c) {
  return c.spec.seqlens.empty() ? std::vector<int64_t>(static_cast<size_t>(c.N), c.spec.T) : c.spec.seqlens;
}

HostTensor random_checkpoint_offsets(const Case& c, int64_t n_ckpt, std::mt19937_64& rng, kda_dtype_t dtype) {
  HostTensor off = make_tensor(dtype, {c.N, n_ckpt});
  const std::vector<int64_t> lens = sequence_lengths(c);
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t j = 0; j < n_ckpt; ++j) {
      const int64_t len = lens[n];
      const int64_t choices[] = {0, len, std::uniform_int_distribution<int64_t>(0, std::max<int64_t>(len, 0))(rng),
                                 len + 5, -3};
      off.set(n * n_ckpt + j, static_cast<double>(choices[std::uniform_int_distribution<int>(0, 4)(rng)]));
    }
  return off;
}

std::vector<CkptCase> checkpoint_cases() {
  return {CkptCase{"every_64_tokens", false, true, KDA_DTYPE_INT32},
          CkptCase{"offsets_int32", true, true, KDA_DTYPE_INT32},
          CkptCase{"offsets_int64_k_first", true, false, KDA_DTYPE_INT64},
          CkptCase{"every_64_tokens_k_first", false, false, KDA_DTYPE_INT32}};
}

CaseSpec checkpoint_case_spec(const CkptCase& k) {
  CaseSpec s;
  s.name = k.name;
  s.H = 2;
  s.HV = 2;
  s.K = s.V = 64;
  s.seqlens = {150, 64, 0, 200, 1};
  s.v_first = k.v_first;
  return s;
}

kda_status_t run_host_checkpoints(Case& c, const HostTensor& offsets, int32_t interval, int64_t n_ckpt,
                                  kda_backend_t be, HostTensor* ck, int cpu_threads) {
  const bool ref = be == KDA_BACKEND_REFERENCE;
  *ck = make_checkpoints(c, n_ckpt, ref ? KDA_DTYPE_FLOAT64 : KDA_DTYPE_FLOAT32);
  Outputs o = make_outputs(c, ref ? KDA_DTYPE_FLOAT64 : c.spec.in_dtype, ref ? KDA_DTYPE_FLOAT64 : KDA_DTYPE_FLOAT32);
  kda_forward_args_t a = host_args(c, o, be);
  a.state_checkpoints = ck->view();
  a.checkpoint_offsets = offsets.view();
  a.checkpoint_interval = interval;
  a.cpu_threads = cpu_threads;
  return kda_forward(&a, nullptr, 0, nullptr);
}

CheckpointVerdict judge_checkpoints(const Case& c, const HostTensor& offsets, int64_t interval, int64_t n_ckpt,
                                    const HostTensor& ref, const HostTensor& got, const HostTensor& before,
                                    const Tolerance& tol) {
  const CaseSpec& s = c.spec;
  const std::vector<int64_t> lens = sequence_lengths(c);
  const int64_t per = int64_t{s.HV} * s.V * s.K;
  CheckpointVerdict v;
  // The written entries, packed, against the reference's (compare_state's blocks are K * V elements: one
  // (entry, head) state each, whatever the packing).
  HostTensor g = make_tensor(KDA_DTYPE_FLOAT32, {std::max<int64_t>(got.numel(), 1)});
  Oracle o;
  o.final_state = make_tensor(KDA_DTYPE_FLOAT64, {std::max<int64_t>(got.numel(), 1)});
  int64_t packed = 0;
  const size_t el = got.dtype == KDA_DTYPE_FLOAT64 ? 8 : 4;
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t j = 0; j < n_ckpt; ++j) {
      const int64_t cnt = checkpoint_count_of(offsets, interval, n, n_ckpt, j);
      const bool w = cnt >= 0 && cnt <= lens[n];
      const int64_t base = (n * n_ckpt + j) * per;
      if (w) {
        for (int64_t i = 0; i < per; ++i) {
          g.set(packed + i, got.at(base + i));
          o.final_state.set(packed + i, ref.at(base + i));
        }
        packed += per;
        ++v.written;
      } else if (v.untouched_error.empty() &&
                 std::memcmp(got.bytes.data() + base * el, before.bytes.data() + base * el, per * el) != 0) {
        v.untouched_error = "entry n " + std::to_string(n) + " j " + std::to_string(j) + " (count " +
                            std::to_string(cnt) + ", sequence length " + std::to_string(lens[n]) + ") was written";
      }
    }
  g.shape = {std::max<int64_t>(packed, 1)};
  g.bytes.resize(static_cast<size_t>(std::max<int64_t>(packed, 1)) * 4);
  o.final_state.shape = g.shape;
  o.final_state.bytes.resize(static_cast<size_t>(std::max<int64_t>(packed, 1)) * 8);
  if (packed > 0) v.stats = compare_state(g, o, tol, int64_t{s.K} * s.V);
  return v;
}

}  // namespace kda::testing
