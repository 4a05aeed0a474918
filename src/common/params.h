// params.h: the validated forward problem as raw pointers, element strides and flags; one struct shared by
// every backend (host and device code), built once by src/api/validate.cpp.
#pragma once

#include <stdint.h>

#include "kda/kda.h"

#if defined(__CUDACC__)
#define KDA_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define KDA_HOST_DEVICE inline
#endif

namespace kda {

// A tensor after validation: base pointer, dtype and strides in elements in the operator's index order.
struct TensorView {
  const void* data = nullptr;
  kda_dtype_t dtype = KDA_DTYPE_FLOAT32;
  int64_t stride[4] = {0, 0, 0, 0};
};

struct ForwardParams {
  // Sizes. N = B without cu_seqlens, else len(cu_seqlens) - 1 (and B == 1).
  int64_t B = 0, T = 0, N = 0;
  int32_t H = 0, HV = 0, K = 0, V = 0;
  int32_t group = 1;  // HV / H: value head hv reads q/k head hv / group

  TensorView q, k;    // [B, T, H, K]
  TensorView v;       // [B, T, HV, V]
  TensorView g;       // [B, T, HV, K]
  TensorView beta;    // [B, T, HV]
  TensorView A_log;   // [HV] fp32 or absent
  TensorView dt_bias; // [HV, K] fp32 (flat [HV*K] is given strides {K, 1}) or absent
  TensorView cu_seqlens;  // [N+1] int32/int64 or absent

  // States in the logical index order [n, hv, row, col]; state_v_first says whether row is V or K.
  TensorView initial_state;  // absent: zeros
  void* out = nullptr;       // [B, T, HV, V]
  kda_dtype_t out_dtype = KDA_DTYPE_BFLOAT16;
  int64_t out_stride[4] = {0, 0, 0, 0};
  void* final_state = nullptr;  // absent: not written
  kda_dtype_t final_state_dtype = KDA_DTYPE_FLOAT32;
  int64_t final_state_stride[4] = {0, 0, 0, 0};

  float scale = 1.0f;
  kda_gate_mode_t gate_mode = KDA_GATE_LOG_DECAY;
  float lower_bound = -5.0f;
  bool use_qk_l2norm = false;
  bool beta_is_logits = false;
  bool allow_neg_eigval = false;
  bool state_v_first = true;
  int32_t chunk_size = 0;
  int32_t cpu_threads = 0;
  int32_t device_id = 0;
  kda_backend_t backend = KDA_BACKEND_AUTO;

  KDA_HOST_DEVICE bool has_cu_seqlens() const { return cu_seqlens.data != nullptr; }
  KDA_HOST_DEVICE bool has_initial_state() const { return initial_state.data != nullptr; }
  KDA_HOST_DEVICE bool has_final_state() const { return final_state != nullptr; }
  KDA_HOST_DEVICE bool has_A_log() const { return A_log.data != nullptr; }

  // Element offset of state entry (v, k) of sequence n, value head hv, for a state tensor with these strides.
  KDA_HOST_DEVICE int64_t state_offset(const int64_t* s, int64_t n, int64_t hv, int64_t vi, int64_t ki) const {
    return n * s[0] + hv * s[1] + (state_v_first ? vi * s[2] + ki * s[3] : ki * s[2] + vi * s[3]);
  }
};

}  // namespace kda
