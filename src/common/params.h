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

  // Prefix-cache checkpoints [N, n_ckpt, HV, ., .] (layout as the states), absent when ckpt == nullptr.
  void* ckpt = nullptr;
  kda_dtype_t ckpt_dtype = KDA_DTYPE_FLOAT32;
  int64_t ckpt_stride[5] = {0, 0, 0, 0, 0};
  int64_t n_ckpt = 0;
  TensorView ckpt_offsets;      // [N, n_ckpt] int32/int64, or absent: every ckpt_interval tokens
  int64_t ckpt_interval = 0;
  bool save_for_backward = false;  // the chunked forward also keeps the backward's recompute (BackwardLayout)

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
  KDA_HOST_DEVICE bool has_checkpoints() const { return ckpt != nullptr; }

  // Token count (from the sequence start) whose state checkpoint j of sequence n holds.
  KDA_HOST_DEVICE int64_t checkpoint_tokens(int64_t n, int64_t j) const {
    if (ckpt_offsets.data == nullptr) return (j + 1) * ckpt_interval;
    const int64_t i = n * ckpt_offsets.stride[0] + j * ckpt_offsets.stride[1];
    return ckpt_offsets.dtype == KDA_DTYPE_INT32 ? static_cast<const int32_t*>(ckpt_offsets.data)[i]
                                                 : static_cast<const int64_t*>(ckpt_offsets.data)[i];
  }
  // Element offset of entry (v, k) of checkpoint j of sequence n, value head hv.
  KDA_HOST_DEVICE int64_t checkpoint_offset(int64_t n, int64_t j, int64_t hv, int64_t vi, int64_t ki) const {
    const int64_t* s = ckpt_stride;
    return n * s[0] + j * s[1] + hv * s[2] + (state_v_first ? vi * s[3] + ki * s[4] : ki * s[3] + vi * s[4]);
  }

  // Element offset of state entry (v, k) of sequence n, value head hv, for a state tensor with these strides.
  KDA_HOST_DEVICE int64_t state_offset(const int64_t* s, int64_t n, int64_t hv, int64_t vi, int64_t ki) const {
    return n * s[0] + hv * s[1] + (state_v_first ? vi * s[2] + ki * s[3] : ki * s[2] + vi * s[3]);
  }
};

// The validated decode problem: a few tokens per sequence against a state pool updated in place.
// io holds the per-token inputs, gates, flags and output exactly as for the forward (B = N sequences of T tokens
// each, no cu_seqlens, no initial/final state); the state lives in the pool.
struct DecodeParams {
  ForwardParams io;
  void* pool = nullptr;           // [slots, HV, V, K] or [slots, HV, K, V] (io.state_v_first)
  kda_dtype_t pool_dtype = KDA_DTYPE_FLOAT32;  // fp32, or bf16 (the state rounded once to bf16 when written)
  int64_t pool_stride[4] = {0, 0, 0, 0};
  int64_t slots = 0;
  const int32_t* indices = nullptr;  // [N] or [N, T]
  int64_t index_stride[2] = {0, 0};
  bool indices_per_token = false;    // 2-D indices: the state after token t goes to indices[n, t]
  const int32_t* num_accepted = nullptr;  // [N] or null: read slot indices[n, num_accepted[n] - 1]
  int64_t num_accepted_stride = 0;

  // Fused causal short convolution (width kConvWidth, SiLU) of q, k, v: index 0 = q, 1 = k, 2 = v.
  // conv_w[i]: [dim, 4] (stride[0] per channel, stride[1] per tap); conv_state[i]: [slots, dim, 3] (strides 0..2),
  // written in place (the data pointer is cast back to mutable by the writer).
  static constexpr int kConvWidth = 4;
  bool conv = false;
  TensorView conv_w[3];
  TensorView conv_state[3];
  // Fused gated RMSNorm of the output: norm_weight [V], out_gate [N, T, HV, V].
  bool out_norm = false;
  TensorView norm_weight;
  TensorView out_gate;
  float norm_eps = 1e-5f;
  kda_out_gate_activation_t norm_act = KDA_OUT_GATE_SIGMOID;

  // The slot sequence n starts from (negative: padding, the sequence is skipped).
  // Slots outside [0, slots) count as negative: the pool is never read or written out of bounds.
  KDA_HOST_DEVICE int64_t read_slot(int64_t n) const { return in_pool(read_index(n)); }
  // The slot the state after token t of sequence n goes to (negative: not written).
  KDA_HOST_DEVICE int64_t write_slot(int64_t n, int64_t t) const { return in_pool(write_index(n, t)); }
  // The raw index entries behind read_slot and write_slot (-1 where there is none), for a kernel that issues the
  // index loads with its other loads and tests them against the pool only once all are in flight
  // (hopper/decode_bulk.cu: a test right after a load waits for it, and holds back every load behind it).
  KDA_HOST_DEVICE int32_t read_index(int64_t n) const {
    if (!indices_per_token) return indices[n * index_stride[0]];
    const int64_t a = num_accepted ? num_accepted[n * num_accepted_stride] : 1;
    if (a < 1 || a > io.T) return -1;  // out of range: treated as padding, nothing is read or written
    return indices[n * index_stride[0] + (a - 1) * index_stride[1]];
  }
  KDA_HOST_DEVICE int32_t write_index(int64_t n, int64_t t) const {
    if (indices_per_token) return indices[n * index_stride[0] + t * index_stride[1]];
    return t == io.T - 1 ? indices[n * index_stride[0]] : -1;
  }
  KDA_HOST_DEVICE int64_t in_pool(int64_t s) const { return s < slots ? s : -1; }
};

}  // namespace kda
