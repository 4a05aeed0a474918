// backward_params.h: the validated backward problem for the device backends: the forward's ForwardParams plus the
// upstream gradients (dout, dfinal_state) and every gradient tensor as raw pointers, dtypes and element strides in
// the operator's index order. Built by src/api/c_api.cpp after validate_backward.
#pragma once

#include <stdint.h>

#include "common/params.h"

namespace kda {

// A writable gradient tensor (absent: data == nullptr). Strides in elements, in the index order of its input
// ([B, T, H, K] for dq, [HV, K] for ddt_bias (a flat [HV*K] gets {K * s, s}), [N, HV, ., .] for dh0, ...).
struct GradView {
  void* data = nullptr;
  kda_dtype_t dtype = KDA_DTYPE_FLOAT32;
  int64_t stride[4] = {0, 0, 0, 0};
};

struct BackwardParams {
  ForwardParams f;           // the forward's inputs and flags (out / final_state / checkpoints unused)
  TensorView dout;           // [B, T, HV, V], dtype of q or fp32
  TensorView dfinal;         // state layout, fp32, or absent (zero)
  GradView dq, dk;           // [B, T, H, K]
  GradView dv;               // [B, T, HV, V]
  GradView dg;               // [B, T, HV, K]
  GradView dbeta;            // [B, T, HV]
  GradView dA_log;           // [HV]
  GradView ddt_bias;         // [HV, K]
  GradView dh0;              // state layout
  bool forward_saved = false;  // the workspace holds what the forward kept (save_for_backward): no recompute
};

}  // namespace kda
