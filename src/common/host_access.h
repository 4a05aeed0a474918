// host_access.h: dtype names, host-side reads and writes of tensor elements in any kda dtype (bf16/fp16 conversions with
// round-to-nearest-even), and the host view of the sequence layout. Used by the CPU backends and the tools.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <cstring>
#include <vector>

#include "common/params.h"

namespace kda {

inline const char* dtype_name(kda_dtype_t d) {
  switch (d) {
    case KDA_DTYPE_FLOAT32: return "float32";
    case KDA_DTYPE_FLOAT16: return "float16";
    case KDA_DTYPE_BFLOAT16: return "bfloat16";
    case KDA_DTYPE_FLOAT64: return "float64";
    case KDA_DTYPE_INT32: return "int32";
    case KDA_DTYPE_INT64: return "int64";
  }
  return "unknown dtype";
}

inline float bf16_bits_to_float(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t float_to_bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>(u >> 16);
}

inline double load_element(const void* base, kda_dtype_t dtype, int64_t offset) {
  switch (dtype) {
    case KDA_DTYPE_FLOAT32: return static_cast<const float*>(base)[offset];
    case KDA_DTYPE_FLOAT64: return static_cast<const double*>(base)[offset];
    case KDA_DTYPE_BFLOAT16: return bf16_bits_to_float(static_cast<const uint16_t*>(base)[offset]);
    case KDA_DTYPE_FLOAT16: return static_cast<double>(static_cast<const _Float16*>(base)[offset]);
    case KDA_DTYPE_INT32: return static_cast<const int32_t*>(base)[offset];
    case KDA_DTYPE_INT64: return static_cast<double>(static_cast<const int64_t*>(base)[offset]);
  }
  return 0.0;
}

// Rounds once from double to the destination dtype (bf16 goes through fp32 first: the double rounding
// this implies is below the bf16 half-ulp the contract allows).
inline void store_element(void* base, kda_dtype_t dtype, int64_t offset, double x) {
  switch (dtype) {
    case KDA_DTYPE_FLOAT32: static_cast<float*>(base)[offset] = static_cast<float>(x); break;
    case KDA_DTYPE_FLOAT64: static_cast<double*>(base)[offset] = x; break;
    case KDA_DTYPE_BFLOAT16:
      static_cast<uint16_t*>(base)[offset] = float_to_bf16_bits(static_cast<float>(x));
      break;
    case KDA_DTYPE_FLOAT16: static_cast<_Float16*>(base)[offset] = static_cast<_Float16>(x); break;
    case KDA_DTYPE_INT32: static_cast<int32_t*>(base)[offset] = static_cast<int32_t>(x); break;
    case KDA_DTYPE_INT64: static_cast<int64_t*>(base)[offset] = static_cast<int64_t>(x); break;
  }
}

inline int64_t load_index(const TensorView& t, int64_t i) {
  return t.dtype == KDA_DTYPE_INT32 ? static_cast<const int32_t*>(t.data)[i * t.stride[0]]
                                    : static_cast<const int64_t*>(t.data)[i * t.stride[0]];
}

// One sequence of the problem: its tokens are (batch, start .. start + length - 1).
struct SequenceSpan {
  int64_t batch;
  int64_t start;
  int64_t length;
};

// Host-side sequence list (cu_seqlens must be host-readable: CPU tensors).
inline std::vector<SequenceSpan> host_sequences(const ForwardParams& p) {
  std::vector<SequenceSpan> seqs(static_cast<size_t>(p.N));
  for (int64_t n = 0; n < p.N; ++n) {
    if (p.has_cu_seqlens()) {
      int64_t a = load_index(p.cu_seqlens, n), b = load_index(p.cu_seqlens, n + 1);
      seqs[n] = {0, a, b - a};
    } else {
      seqs[n] = {n, 0, p.T};
    }
  }
  return seqs;
}

// The prefix-cache checkpoints of one (sequence n, value head hv) on the host: the ones whose token count lies in
// [0, len], written in order as the computation reaches their counts. state(vi, ki) reads the current state.
class HostCheckpoints {
 public:
  HostCheckpoints(const ForwardParams& p, int64_t n, int hv, int64_t len) : p_(p), n_(n), hv_(hv) {
    if (!p.has_checkpoints()) return;
    for (int64_t j = 0; j < p.n_ckpt; ++j) {
      const int64_t t = p.checkpoint_tokens(n, j);
      if (t >= 0 && t <= len) c_.emplace_back(t, j);
    }
    std::sort(c_.begin(), c_.end());
  }
  // Writes rows [v0, v1) (v1 < 0: all V) of every checkpoint of token count `count` from the current state.
  template <typename State>
  void write(int64_t count, State&& state, int v0 = 0, int v1 = -1) {
    if (v1 < 0) v1 = p_.V;
    for (; next_ < c_.size() && c_[next_].first == count; ++next_)
      for (int vi = v0; vi < v1; ++vi)
        for (int ki = 0; ki < p_.K; ++ki)
          store_element(p_.ckpt, p_.ckpt_dtype, p_.checkpoint_offset(n_, c_[next_].second, hv_, vi, ki),
                        static_cast<double>(state(vi, ki)));
  }

 private:
  const ForwardParams& p_;
  int64_t n_;
  int hv_;
  std::vector<std::pair<int64_t, int64_t>> c_;  // (token count, checkpoint index), by count
  size_t next_ = 0;
};

}  // namespace kda
