// decode_cases.h: decode problems (a state pool, slot indices with padding, speculative-decoding layouts), their
// oracle built from the forward reference (a decode is a forward from the pool's state; the state after token t
// is the final state of the first t + 1 tokens), and the checks: outputs, written slots, untouched slots bitwise.
#pragma once

#include <string>
#include <vector>

#include "common/cases.h"
#include "common/compare.h"

namespace kda::testing {

struct DecodeSpec {
  std::string name;
  CaseSpec io;            // B = N sequences, T tokens each (io.seqlens must be empty; h0/final unused)
  int64_t slots = 0;      // pool size (> N)
  bool per_token = false; // 2-D indices [N, T]
  bool with_accepted = false;
  double padding = 0.0;   // fraction of sequences marked padding (negative start slot)
  bool conv = false;      // fused causal short conv of q/k/v (conv weights and conv-state pools)
  bool norm = false;      // fused gated RMSNorm of the output
  kda_out_gate_activation_t norm_act = KDA_OUT_GATE_SIGMOID;
  float norm_eps = 1e-5f;
  kda_dtype_t pool_dtype = KDA_DTYPE_FLOAT32;  // the state pool: fp32, or bf16 (its states rounded once when written)
};

struct DecodeCase {
  DecodeSpec spec;
  Case c;                  // q .. beta, gates (its h0 is unused)
  HostTensor pool;         // [slots, HV, V, K] or [slots, HV, K, V], spec.pool_dtype
  HostTensor indices;      // int32 [N] or [N, T]
  HostTensor num_accepted; // int32 [N] or absent
  HostTensor conv_w[3];    // q, k: [H*K, 4], v: [HV*V, 4] fp32 (spec.conv)
  HostTensor conv_state[3];// [slots, dim, 3] dtype of q (spec.conv)
  HostTensor norm_w;       // [V] fp32 (spec.norm)
  HostTensor out_gate;     // [N, T, HV, V] dtype of q (spec.norm)
};

// gtest prints a case by its name.
inline void PrintTo(const DecodeSpec& s, std::ostream* os) { *os << s.name; }

DecodeCase make_decode_case(const DecodeSpec& s, uint64_t seed);

// kda_decode args over host memory: out and the pool (a copy the caller owns and passes in).
kda_decode_args_t decode_host_args(DecodeCase& d, HostTensor& out, HostTensor& pool, kda_backend_t backend);

struct DecodeOracle {
  Oracle out;                         // out [N, T, HV, V] (+ mag); padding sequences: 0 with mag 0
  std::vector<double> pool;           // expected pool (float64), untouched slots as given
  std::vector<bool> written;          // per pool element: written by the call
};
DecodeOracle decode_oracle(const DecodeCase& d);


struct DecodeVerdict {
  bool pass = false;
  ErrorStats out, pool;
  int64_t untouched_changed = 0;  // elements of slots the call must not touch that changed (bitwise)
  int64_t conv_wrong = 0;         // conv-state entries not equal to their expected value (fused conv)
  std::string summary() const;
};
DecodeVerdict judge_decode(const DecodeCase& d, const DecodeOracle& o, const HostTensor& out, const HostTensor& pool,
                           const Tolerance& tol);

// Decode with the fusions (conv + SiLU of q/k/v with its conv state, gated RMSNorm), written out by hand in float64
// (independent of the library's host_decode): expected out, pool and conv states with their written masks. Also
// valid without fusions. Gates: the bounded and softplus gates and log-decay, beta logits / neg eigval, l2 norm.
struct FusedDecodeOracle {
  DecodeOracle base;                       // out, pool
  std::vector<double> conv_state[3];       // expected conv states
  std::vector<bool> conv_written[3];
};
FusedDecodeOracle decode_fused_oracle(const DecodeCase& d);
// judge_decode plus the conv states: written entries equal (they are copies of inputs), the rest bitwise given.
DecodeVerdict judge_fused_decode(const DecodeCase& d, const FusedDecodeOracle& o, const HostTensor& out,
                                 const HostTensor& pool, const HostTensor* conv_state, const Tolerance& tol);

// Fused decode cases (conv, norm, both; 1-D and 2-D indices; sigmoid and SiLU gates).
std::vector<DecodeSpec> fused_decode_cases();

// Small random and hostile decode cases (both pool layouts, padding, 1-D and 2-D indices, num_accepted, all
// gates, grouped heads, head dims 16..256).
std::vector<DecodeSpec> decode_cases();

}  // namespace kda::testing
