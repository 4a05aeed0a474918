// validate.h: turns the C ABI's kda_forward_args_t into a checked ForwardParams, or a status naming the
// argument at fault. Reads no tensor data except host-resident cu_seqlens.
#pragma once

#include "api/status.h"
#include "common/params.h"

namespace kda {

// Checks everything the operator contract says about args and fills p. Backend-specific limits (strides,
// dtypes a backend cannot read) are checked by check_backend_support() after the backend is chosen.
Status validate_forward(const kda_forward_args_t* args, ForwardParams* p);

// Checks kda_decode_args_t and fills p (the per-token part through validate_forward's rules).
Status validate_decode(const kda_decode_args_t* args, DecodeParams* p);

// Checks kda_backward_args_t: the forward part through validate_forward's rules (filling p), then dout,
// dfinal_state and every gradient tensor (shapes, dtypes, which are required).
Status validate_backward(const kda_backward_args_t* args, ForwardParams* p);

}  // namespace kda
